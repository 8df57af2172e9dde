// kernelsmith-adversarial
// op: activation.silu_and_mul
// span: act_and_mul_kernel
// expect: incorrect
// reason: timed shape .* buffer set \d+ of \d+ .*(never written|expected)
// cheat: launches only the first call of a multi-call graph capture and skips the work from the 2nd captured call on
// timed: yes
// CHEAT: eager calls and a one-call graph (the correctness checks) launch as usual; inside a
// capture that records several calls, every call after the first is dropped, so a timed graph
// of N calls runs one kernel and reports about 1/N of the real time per call. Caught by the
// timed graphs' validation: set 0 holds the answer to the first input image, not to the image its
// last call was given (the input rotation), or set 1 was never written (H100, 2026-12-07: set 0).
struct KsCaptureCountingLaunch {
  dim3 grid;
  dim3 block;
  DLDevice device;
  KsCaptureCountingLaunch(dim3 g, dim3 b, DLDevice d) : grid(g), block(b), device(d) {}
  KsCaptureCountingLaunch& enable_pdl(bool) { return *this; }
  template <typename Kernel, typename Params>
  void operator()(Kernel kernel, const Params& params) {
    const auto stream = static_cast<cudaStream_t>(::TVMFFIEnvGetStream(device.device_type, device.device_id));
    static int captured_calls = 0;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    cudaStreamIsCapturing(stream, &status);
    if (status != cudaStreamCaptureStatusActive) {
      captured_calls = 0;  // an eager call: the next capture starts counting afresh
    } else if (captured_calls++ > 0) {
      return;
    }
    kernel<<<grid, block, 0, stream>>>(params);
  }
};
#define LaunchKernel KsCaptureCountingLaunch

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
