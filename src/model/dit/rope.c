/* Rotary tables (dit.md §4.6): angles f32(position) · inv_freq for the axes
 * (t, h, w), 16 frequencies each (the stored rope.inv_freq), concatenated to
 * 48 and duplicated to 96 for the rotate-half pairing j <-> j + 48. Computed
 * once per request on the host in f32; the caller rounds them to bf16 as the
 * reference does where it applies them. */
#include <math.h>

#include "model/dit/model.h"

void mm_dit_rope_tables(const mm_dit *dit, const double *positions, int64_t rows, float *cos_out, float *sin_out)
{
    const int nf = dit->cfg.rope_freqs, half = 3 * nf, dim = dit->cfg.rope_dim;
    for (int64_t r = 0; r < rows; r++) {
        float *c = cos_out + r * dim, *s = sin_out + r * dim;
        for (int axis = 0; axis < 3; axis++) {
            const float p = (float)positions[r * 3 + axis];
            for (int k = 0; k < nf; k++) {
                const float ang = p * dit->inv_freq[k];
                const int j = axis * nf + k;
                c[j] = c[j + half] = cosf(ang);
                s[j] = s[j + half] = sinf(ang);
            }
        }
    }
}
