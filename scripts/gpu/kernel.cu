// imagekit's plain-nvcc probe: built with `nvcc -gencode arch=compute_90,code=sm_90 k.cu -o k` in the devel
// image (no -L, no -lcudart: nvcc.profile's own search path must find libcudart_static).
#include <cstdio>
__global__ void twice(int *out) { out[threadIdx.x] = 2 * threadIdx.x; }
int main() {
  int *d, h[32], sum = 0;
  if (cudaMalloc(&d, sizeof h) != cudaSuccess) { printf("cudaMalloc failed\n"); return 1; }
  twice<<<1, 32>>>(d);
  cudaError_t e = cudaMemcpy(h, d, sizeof h, cudaMemcpyDeviceToHost);
  if (e != cudaSuccess) { printf("kernel failed: %s\n", cudaGetErrorString(e)); return 1; }
  for (int i = 0; i < 32; i++) sum += h[i];
  printf("kernel sum %d\n", sum);
  return sum == 992 ? 0 : 1;
}
