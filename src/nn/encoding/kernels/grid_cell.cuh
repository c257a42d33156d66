// The cell of a grid level a coordinate falls in: one definition for the grid kernels
// (encoding.cu) and the grid backward fused into the MLP kernels (grid_scatter.cuh).
#pragma once
/* x clamped to [0, 1] on a level of `side` vertices: the cell (at most side - 2) and the
 * fraction of the way across it */
__device__ __forceinline__ void grid_cell(float x, int side, unsigned &cell, float &frac) {
    float xc = x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x);
    float pos = __fmul_rn(xc, (float)(side - 1));
    float fl = floorf(pos);
    if (fl > (float)(side - 2)) fl = (float)(side - 2);
    cell = (unsigned)fl;
    frac = pos - fl;
}
