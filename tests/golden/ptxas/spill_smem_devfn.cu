__constant__ float table[64];
__device__ __noinline__ float helper(float x, int n) { float a[32]; for (int i=0;i<32;i++) a[i]=x*i; return a[n&31]; }
__global__ void smem_kernel(float* out, const float* in, int n) {
  __shared__ float buf[1024];
  buf[threadIdx.x] = in[threadIdx.x] * table[threadIdx.x & 63];
  __syncthreads();
  out[threadIdx.x] = helper(buf[(threadIdx.x + n) & 1023], n);
}
template <int N> __global__ void spill_kernel(float* out, const float* in) {
  float v[N];
  #pragma unroll
  for (int i = 0; i < N; i++) v[i] = in[i * blockDim.x + threadIdx.x] * in[i];
  float s = 0;
  #pragma unroll
  for (int i = 0; i < N; i++) s += v[i] * v[(i * 7) % N];
  out[threadIdx.x] = s;
}
template __global__ void spill_kernel<96>(float*, const float*);
extern "C" __global__ void plain_c(int* p) { *p = 1; }
