/* Prints mmh3's torch-generator values for the requests read from stdin, one
 * per line, as hexadecimal float bits (for tests/device/torch_rng_check.py,
 * which compares them with torch on the same host):
 *   randn SEED N             torch.randn(N) with torch.Generator().manual_seed(SEED)
 *   linspace N LANES         torch.linspace(1, 0, N) (f32), the kernel's vector width LANES
 *   sigmas N SHIFT           the sampler's sigma grid for N points
 * Built by the script with the compiler alone: cc -Isrc tests/device/torch_rng_check.c
 * src/sampler/torch_rng.c src/sampler/sigmas.c src/core/error.c -lm */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sampler/sigmas.h"
#include "sampler/torch_rng.h"

static void print(const float *v, int64_t n)
{
    for (int64_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &v[i], 4);
        printf("%s%08x", i ? " " : "", u);
    }
    printf("\n");
}

int main(void)
{
    char kind[32];
    while (scanf("%31s", kind) == 1) {
        if (strcmp(kind, "randn") == 0) {
            unsigned long long seed;
            long long n;
            if (scanf("%llu %lld", &seed, &n) != 2)
                return 2;
            float *v = malloc(sizeof(float) * (size_t)(n ? n : 1));
            mm_torch_gen g;
            mm_torch_gen_seed(&g, seed);
            mm_torch_randn_f32(&g, v, n);
            print(v, n);
            free(v);
        } else if (strcmp(kind, "linspace") == 0) {
            int n, lanes;
            if (scanf("%d %d", &n, &lanes) != 2)
                return 2;
            float *v = malloc(sizeof(float) * (size_t)n);
            mm_torch_linspace_f32(1.0f, 0.0f, n, lanes, v);
            print(v, n);
            free(v);
        } else if (strcmp(kind, "sigmas") == 0) {
            int n;
            float shift;
            if (scanf("%d %f", &n, &shift) != 2)
                return 2;
            mm_sigma_schedule s;
            if (mm_sigma_schedule_build(n, shift, &s, NULL) != 0)
                return 2;
            print(s.sigmas, s.points);
            mm_sigma_schedule_free(&s);
        } else {
            return 2;
        }
        fflush(stdout);
    }
    return 0;
}
