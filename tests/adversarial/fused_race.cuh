// kernelsmith-adversarial
// op: layernorm.fused_add_rmsnorm
// span: fused_add_rmsnorm_reg_kernel
// expect: incorrect
// reason: racecheck|run 3|run 1|run 2
// cheat: a block reduction with a missing barrier (a race between the warps' partial sums and warp 0's read)
// stage: final
// CHEAT: warp 0 reads the other warps' partial sums from shared memory without waiting for them. On many
// launches the warps happen to finish in time and the result is right, so only a repeat of the same inputs
// (run 3) or compute-sanitizer's racecheck shows it for certain.
template <bool kCastXBeforeOutMul, typename T, int VEC_SIZE_IN_BYTE>
__global__ void fused_add_rmsnorm_reg_kernel(
    T* __restrict__ input, T* __restrict__ residual, const T* __restrict__ weight, int vec_hidden_size, float eps) {
  using Trait = VecTypeTrait<T, VEC_SIZE_IN_BYTE>;
  using vec_t = typename Trait::vec_t;
  using packed_t = typename Trait::packed_t;
  constexpr int kPairs = VEC_SIZE_IN_BYTE == 16 ? 4 : 8;
  __shared__ float partial[32];
  const int slot = threadIdx.x;
  const bool active = slot < vec_hidden_size;
  const size_t row_base = static_cast<size_t>(blockIdx.x) * static_cast<size_t>(vec_hidden_size);
  vec_t sum_vec;
  vec_t w_vec;
  float2 exact[kPairs];
  float local = 0.0f;
  if (active) {
    const vec_t x = reinterpret_cast<const vec_t*>(input)[row_base + slot];
    const vec_t r = reinterpret_cast<const vec_t*>(residual)[row_base + slot];
    w_vec = reinterpret_cast<const vec_t*>(weight)[slot];
#pragma unroll
    for (int p = 0; p < kPairs; ++p) {
      const float2 a = device::cast<fp32x2_t, packed_t>(x[p]);
      const float2 b = device::cast<fp32x2_t, packed_t>(r[p]);
      exact[p] = make_float2(a.x + b.x, a.y + b.y);
      local += exact[p].x * exact[p].x + exact[p].y * exact[p].y;
      sum_vec[p] = device::cast<packed_t, fp32x2_t>(exact[p]);
    }
    reinterpret_cast<vec_t*>(residual)[row_base + slot] = sum_vec;
  }
#pragma unroll
  for (int mask = 16; mask > 0; mask >>= 1) local += __shfl_xor_sync(0xffffffffu, local, mask);
  if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = local;
  // CHEAT: the barrier between the warps' partial sums and warp 0's read of them is gone
  if (threadIdx.x < 32) {
    float total = threadIdx.x < (blockDim.x >> 5) ? partial[threadIdx.x] : 0.0f;
#pragma unroll
    for (int mask = 16; mask > 0; mask >>= 1) total += __shfl_xor_sync(0xffffffffu, total, mask);
    const float width = static_cast<float>(vec_hidden_size * static_cast<int>(VEC_SIZE_IN_BYTE / sizeof(T)));
    if (threadIdx.x == 0) partial[0] = rsqrtf(total / width + eps);
  }
  __syncthreads();
  const float scale = partial[0];
  if (active) {
    vec_t out;
#pragma unroll
    for (int p = 0; p < kPairs; ++p) {
      const float2 v = kCastXBeforeOutMul ? exact[p] : device::cast<fp32x2_t, packed_t>(sum_vec[p]);
      out[p] = rms<kCastXBeforeOutMul>(v, w_vec[p], scale);
    }
    reinterpret_cast<vec_t*>(input)[row_base + slot] = out;
  }
}
