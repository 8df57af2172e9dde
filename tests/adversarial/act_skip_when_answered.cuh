// kernelsmith-adversarial
// op: activation.silu_and_mul
// span: act_and_mul_kernel
// expect: incorrect
// reason: timed shape .* buffer set \d+ of \d+ .*
// cheat: skips the work when the output already holds a number of an answer's size (from the call before on the same buffers)
// timed: yes
// CHEAT: each thread first reads its output pack; when every lane already holds a number of an
// answer's size (|v| < 4: silu(g) * u of unit-normal inputs) rather than the harness's NaN poison
// or its finite garbage (unit normals times 777), the pack is taken to be this call's answer and
// nothing is loaded, computed or stored. The correctness checks start from poison or garbage, so
// they see an honest kernel; in a timed graph whose calls reuse output buffers it skips every call
// after the first on each buffer. Only the input rotation of the timed graphs catches it. (Its
// first form took any finite value for an answer, and the garbage replay caught it first; with
// |v| < 16 a 4-lane fp32 pack of garbage passed for an answer about once in 2e7 packs, and the
// garbage replay caught that too, by chance: H100, 2026-12-07. Below 4, about once in 4e9.)
template <
    typename T,
    ActivationKind kAct,
    bool kUsePDL,
    bool kFilterExpert,
    bool kRoundActivation = false,
    bool kReuseInput = false,
    bool kClamp = false,
    bool kFilterSorted = false>
__global__ void act_and_mul_kernel(const __grid_constant__ ActivationParams params) {
  constexpr uint32_t kLanes = device::kMaxVecBytes / sizeof(T);
  using Pack = device::AlignedVector<T, kLanes>;
  const uint32_t packs_per_row = params.hidden_dim / kLanes;
  const uint32_t item = blockIdx.x * blockDim.x + threadIdx.x;
  const uint32_t row = item / packs_per_row;
  const uint32_t col = item - row * packs_per_row;
  if (row >= params.num_tokens) return;
  if constexpr (kFilterSorted) {
    const uint32_t padded = static_cast<uint32_t>(params.num_tokens_post_padded[0]);
    const uint32_t sorted = static_cast<uint32_t>(params.sorted_token_ids[row]);
    const int32_t expert = params.expert_ids[row / params.expert_step];
    if (row >= padded || sorted >= params.num_valid_tokens || expert == -1) return;
  } else if constexpr (kFilterExpert) {
    if (params.expert_ids[row / params.expert_step] == -1) return;
  }
  const uint32_t in_index = row * 2u * packs_per_row + col;
  const uint32_t out_index = kReuseInput ? in_index : item;
  device::PDLWaitPrimary<kUsePDL>();
  if constexpr (!kReuseInput) {
    const Pack held = device::load_as<Pack>(params.out, out_index);
    bool answered = true;
#pragma unroll
    for (uint32_t lane = 0; lane < kLanes; ++lane) {
      const float v = device::cast<fp32_t>(held[lane]);
      answered = answered && (v == v) && v < 4.0f && v > -4.0f;
    }
    if (answered) {
      device::PDLTriggerSecondary<kUsePDL>();
      return;
    }
  }
  const Pack gate = device::load_as<Pack>(params.input, in_index);
  const Pack up = device::load_as<Pack>(params.input, in_index + packs_per_row);
  const float limit = device::cast<fp32_t>(device::cast<T>(params.clamp_limit));
  Pack result;
#pragma unroll
  for (uint32_t lane = 0; lane < kLanes; ++lane) {
    float g = device::cast<fp32_t>(gate[lane]);
    float u = device::cast<fp32_t>(up[lane]);
    if constexpr (kClamp) {
      g = g > limit ? limit : g;
      u = u > limit ? limit : (u < -limit ? -limit : u);
    }
    float a = apply_activation_f32<kAct>(g);
    if constexpr (kRoundActivation) {
      a = device::cast<fp32_t>(device::cast<T>(a));
    }
    result[lane] = device::cast<T>(a * u);
  }
  void* dst = kReuseInput ? const_cast<void*>(params.input) : params.out;
  device::store_as<Pack>(dst, result, out_index);
  device::PDLTriggerSecondary<kUsePDL>();
}
