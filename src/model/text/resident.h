/* The device copies a Qwen3-VL tower keeps of its checkpoint's tensors:
 * host (mmap) views moved once at load, owned here and freed together. On
 * the CPU the views stay views and nothing is copied. */
#ifndef MMH3_MODEL_TEXT_RESIDENT_H
#define MMH3_MODEL_TEXT_RESIDENT_H

#include "backend/ops.h"

typedef struct mm_resident {
    mm_device device; /* where the model runs */
    mm_tensor *owned; /* device copies (none on the CPU) */
    int n, cap;
} mm_resident;

/* Replaces the host view *t by a view of its owned copy on r->device (on the
 * CPU: leaves it as it is). */
int mm_resident_place(mm_resident *r, mm_ctx *ctx, mm_tensor *t, mm_error *err);
void mm_resident_free(mm_resident *r);

#endif
