/* Loss-curve PNG (nb_image_plot_loss, include/nabla/image.h; `nabla unet train --loss-png`): a
 * line plot drawn into an f32 RGB image and written with nb_image_write_png (no plotting library).
 * Log-scale y with decade grid lines (minor lines at 2..9), linear x (steps) with ~6 ticks, tick
 * labels and axis names in a 3x5 pixel font (digits, '.', 'e', '-', a few capitals). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nabla/image.h"
#include "nabla/tensor.h"

#define W 800
#define H 480
#define ML 70 /* margins: left, right, top, bottom */
#define MR 20
#define MT 30
#define MB 40

typedef struct canvas {
    float *p; /* [H, W, 3] */
} canvas;

static void px(canvas *c, int x, int y, float r, float g, float b) {
    if (x < 0 || y < 0 || x >= W || y >= H) return;
    float *q = c->p + ((size_t)y * W + x) * 3;
    q[0] = r, q[1] = g, q[2] = b;
}

static void line(canvas *c, int x0, int y0, int x1, int y1, float r, float g, float b, int thick) {
    int dx = abs(x1 - x0), dy = -abs(y1 - y0), sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1, e = dx + dy;
    for (;;) {
        for (int i = 0; i < thick; i++)
            for (int j = 0; j < thick; j++) px(c, x0 + i - thick / 2, y0 + j - thick / 2, r, g, b);
        if (x0 == x1 && y0 == y1) break;
        int e2 = 2 * e;
        if (e2 >= dy) e += dy, x0 += sx;
        if (e2 <= dx) e += dx, y0 += sy;
    }
}

/* 3x5 glyphs, rows top to bottom, 3 bits each (bit 2 = left column). */
static const char *const glyph_chars = "0123456789.e-STEPLOG";
static const unsigned char glyphs[20][5] = {
    {7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7}, {5, 5, 7, 1, 1},
    {7, 4, 7, 1, 7}, {7, 4, 7, 5, 7}, {7, 1, 1, 1, 1}, {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7},
    {0, 0, 0, 0, 2}, {0, 7, 5, 6, 7}, {0, 0, 7, 0, 0}, {3, 4, 2, 1, 6}, {7, 2, 2, 2, 2},
    {7, 4, 6, 4, 7}, {6, 5, 6, 4, 4}, {4, 4, 4, 4, 7}, {2, 5, 5, 5, 2}, {3, 4, 5, 5, 3}};

/* Text at (x, y) (top-left), scale s pixels per font pixel; unknown characters are blanks. */
static void text(canvas *c, int x, int y, const char *s, int scale) {
    for (; *s; s++, x += 4 * scale) {
        const char *k = strchr(glyph_chars, *s);
        if (!k || !*s) continue;
        const unsigned char *g = glyphs[k - glyph_chars];
        for (int r = 0; r < 5; r++)
            for (int b = 0; b < 3; b++)
                if (g[r] >> (2 - b) & 1)
                    for (int i = 0; i < scale; i++)
                        for (int j = 0; j < scale; j++) px(c, x + b * scale + i, y + r * scale + j, 0, 0, 0);
    }
}

static int text_w(const char *s, int scale) { return (int)strlen(s) * 4 * scale; }

nb_status nb_image_plot_loss(const char *path, const double *x, const double *y, int n) {
    if (!path || !x || !y || n < 1) return nb_error(NB_ERR_INVALID_ARG, "loss plot: no points");
    double x0 = x[0], x1 = x[n - 1], lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n; i++)
        if (y[i] > 0 && isfinite(y[i])) lo = fmin(lo, y[i]), hi = fmax(hi, y[i]);
    if (!(lo <= hi)) return nb_error(NB_ERR_INVALID_ARG, "loss plot: no positive finite loss");
    if (x1 <= x0) x1 = x0 + 1;
    double ly0 = floor(log10(lo)), ly1 = ceil(log10(hi));
    if (ly1 <= ly0) ly1 = ly0 + 1;
    nb_device *cpu;
    nb_tensor *img;
    nb_status s = nb_device_open("cpu", &cpu);
    if (s) return s;
    s = nb_tensor_empty(cpu, NB_F32, 3, (int64_t[]){H, W, 3}, &img);
    if (s) {
        nb_device_close(cpu);
        return s;
    }
    canvas c = {nb_tensor_data(img)};
    for (size_t i = 0; i < (size_t)W * H * 3; i++) c.p[i] = 1.0f;
    int pw = W - ML - MR, ph = H - MT - MB;
#define MAPX(v) (ML + (int)lround(((v) - x0) / (x1 - x0) * pw))
#define MAPY(v) (MT + ph - (int)lround((log10(v) - ly0) / (ly1 - ly0) * ph))
    char buf[32];
    /* y grid: decades (dark) and 2..9 (light), labels at decades */
    for (int d = (int)ly0; d <= (int)ly1; d++) {
        for (int m = 1; m <= 9 && (m == 1 || d < (int)ly1); m++) {
            double v = m * pow(10.0, d);
            int yy = MAPY(v);
            float g = m == 1 ? 0.6f : 0.88f;
            line(&c, ML, yy, ML + pw, yy, g, g, g, 1);
        }
        if (d >= 0 && d <= 3) snprintf(buf, sizeof buf, "%.0f", pow(10.0, d));
        else if (d < 0 && d >= -3) snprintf(buf, sizeof buf, "%.*f", -d, pow(10.0, d));
        else snprintf(buf, sizeof buf, "1e%d", d);
        text(&c, ML - 8 - text_w(buf, 2), MAPY(pow(10.0, d)) - 5, buf, 2);
    }
    /* x ticks: a round step giving ~6 ticks */
    double span = x1 - x0, step = pow(10.0, floor(log10(span / 6)));
    if (span / step > 12) step *= 5;
    else if (span / step > 6) step *= 2;
    for (double v = ceil(x0 / step) * step; v <= x1 + 1e-9; v += step) {
        int xx = MAPX(v);
        line(&c, xx, MT, xx, MT + ph, 0.88f, 0.88f, 0.88f, 1);
        snprintf(buf, sizeof buf, "%.0f", v);
        text(&c, xx - text_w(buf, 2) / 2, MT + ph + 8, buf, 2);
    }
    /* axes box */
    line(&c, ML, MT, ML + pw, MT, 0, 0, 0, 1);
    line(&c, ML, MT + ph, ML + pw, MT + ph, 0, 0, 0, 1);
    line(&c, ML, MT, ML, MT + ph, 0, 0, 0, 1);
    line(&c, ML + pw, MT, ML + pw, MT + ph, 0, 0, 0, 1);
    /* the curve */
    int have = 0, px0 = 0, py0 = 0;
    for (int i = 0; i < n; i++) {
        if (!(y[i] > 0 && isfinite(y[i]))) {
            have = 0;
            continue;
        }
        int xx = MAPX(x[i]), yy = MAPY(y[i]);
        if (have) line(&c, px0, py0, xx, yy, 0.1f, 0.3f, 0.8f, 2);
        else px(&c, xx, yy, 0.1f, 0.3f, 0.8f);
        px0 = xx, py0 = yy, have = 1;
    }
    text(&c, ML + pw / 2 - text_w("STEP", 2) / 2, H - 14, "STEP", 2);
    text(&c, 8, 8, "LOSS", 2);
#undef MAPX
#undef MAPY
    s = nb_image_write_png(path, img);
    nb_tensor_free(img);
    nb_device_close(cpu);
    return s;
}
