/* Line plots as PNG, drawn into an f32 RGB image and written with nb_image_write_png (no plotting
 * library): the loss curve (nb_image_plot_loss, include/nabla/image.h; `nabla unet train
 * --loss-png`: log-scale y with decade grid lines (minor lines at 2..9), linear x (steps) with ~6
 * ticks) and several named series over a log-log grid (nb_image_plot_lines; `nabla graph bench`).
 * Tick labels, axis names and the legend in a 3x5 pixel font (digits, capitals, a little
 * punctuation; lower case is drawn as capitals). */
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
    float *p; /* [h, w, 3] */
    int w, h;
} canvas;

static void px(canvas *c, int x, int y, float r, float g, float b) {
    if (x < 0 || y < 0 || x >= c->w || y >= c->h) return;
    float *q = c->p + ((size_t)y * c->w + x) * 3;
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
static const char *const glyph_chars = "0123456789.e-ABCDEFGHIJKLMNOPQRSTUVWXYZ_()/:,+=%";
static const unsigned char glyphs[][5] = {
    {7, 5, 5, 5, 7}, {2, 6, 2, 2, 7}, {7, 1, 7, 4, 7}, {7, 1, 7, 1, 7}, {5, 5, 7, 1, 1},
    {7, 4, 7, 1, 7}, {7, 4, 7, 5, 7}, {7, 1, 1, 1, 1}, {7, 5, 7, 5, 7}, {7, 5, 7, 1, 7},
    {0, 0, 0, 0, 2}, {0, 7, 5, 6, 7}, {0, 0, 7, 0, 0},
    /* A-Z */
    {2, 5, 7, 5, 5}, {6, 5, 6, 5, 6}, {3, 4, 4, 4, 3}, {6, 5, 5, 5, 6}, {7, 4, 6, 4, 7},
    {7, 4, 6, 4, 4}, {3, 4, 5, 5, 3}, {5, 5, 7, 5, 5}, {7, 2, 2, 2, 7}, {1, 1, 1, 5, 2},
    {5, 5, 6, 5, 5}, {4, 4, 4, 4, 7}, {5, 7, 7, 5, 5}, {6, 5, 5, 5, 5}, {2, 5, 5, 5, 2},
    {6, 5, 6, 4, 4}, {2, 5, 5, 6, 3}, {6, 5, 6, 5, 5}, {3, 4, 2, 1, 6}, {7, 2, 2, 2, 2},
    {5, 5, 5, 5, 7}, {5, 5, 5, 5, 2}, {5, 5, 7, 7, 5}, {5, 5, 2, 5, 5}, {5, 5, 2, 2, 2},
    {7, 1, 2, 4, 7},
    /* _ ( ) / : , + = % */
    {0, 0, 0, 0, 7}, {1, 2, 2, 2, 1}, {4, 2, 2, 2, 4}, {1, 1, 2, 4, 4}, {0, 2, 0, 2, 0},
    {0, 0, 0, 2, 4}, {0, 2, 7, 2, 0}, {0, 7, 0, 7, 0}, {5, 1, 2, 4, 5}};

/* Text at (x, y) (top-left), scale s pixels per font pixel, in colour (r, g, b); lower case
 * letters as capitals except an 'e' after a digit (an exponent: 1e-3), unknown characters as
 * blanks. */
static void text_rgb(canvas *c, int x, int y, const char *s, int scale, float cr, float cg,
                     float cb) {
    for (const char *s0 = s; *s; s++, x += 4 * scale) {
        char ch = *s;
        if (ch >= 'a' && ch <= 'z' && !(ch == 'e' && s > s0 && s[-1] >= '0' && s[-1] <= '9'))
            ch = (char)(ch - 'a' + 'A');
        const char *k = strchr(glyph_chars, ch);
        if (!k || !ch) continue;
        const unsigned char *g = glyphs[k - glyph_chars];
        for (int r = 0; r < 5; r++)
            for (int b = 0; b < 3; b++)
                if (g[r] >> (2 - b) & 1)
                    for (int i = 0; i < scale; i++)
                        for (int j = 0; j < scale; j++)
                            px(c, x + b * scale + i, y + r * scale + j, cr, cg, cb);
    }
}
static void text(canvas *c, int x, int y, const char *s, int scale) {
    text_rgb(c, x, y, s, scale, 0, 0, 0);
}

static int text_w(const char *s, int scale) { return (int)strlen(s) * 4 * scale; }

/* A white w x h RGB canvas in a CPU tensor (*cpu, *img: released by canvas_done). */
static nb_status canvas_new(int w, int h, nb_device **cpu, nb_tensor **img, canvas *c) {
    nb_status s = nb_device_open("cpu", cpu);
    if (s) return s;
    s = nb_tensor_empty(*cpu, NB_F32, 3, (int64_t[]){h, w, 3}, img);
    if (s) {
        nb_device_close(*cpu);
        return s;
    }
    c->p = nb_tensor_data(*img), c->w = w, c->h = h;
    for (size_t i = 0; i < (size_t)w * h * 3; i++) c->p[i] = 1.0f;
    return NB_OK;
}
/* Writes the canvas as PNG (when path) and releases it. */
static nb_status canvas_done(const char *path, nb_device *cpu, nb_tensor *img) {
    nb_status s = path ? nb_image_write_png(path, img) : NB_OK;
    nb_tensor_free(img);
    nb_device_close(cpu);
    return s;
}

/* Pixel row of v on a log y axis over decades [ly0, ly1] of a plot ph pixels high. */
static int map_logy(double v, double ly0, double ly1, int ph) {
    return MT + ph - (int)lround((log10(v) - ly0) / (ly1 - ly0) * ph);
}

/* Log y grid of a plot pw x ph at (ML, MT): decades (dark, labelled) and 2..9 (light). */
static void log_ygrid(canvas *c, int pw, int ph, double ly0, double ly1) {
    char buf[32];
    for (int d = (int)ly0; d <= (int)ly1; d++) {
        for (int m = 1; m <= 9 && (m == 1 || d < (int)ly1); m++) {
            int yy = map_logy(m * pow(10.0, d), ly0, ly1, ph);
            float g = m == 1 ? 0.6f : 0.88f;
            line(c, ML, yy, ML + pw, yy, g, g, g, 1);
        }
        if (d >= 0 && d <= 3) snprintf(buf, sizeof buf, "%.0f", pow(10.0, d));
        else if (d < 0 && d >= -3) snprintf(buf, sizeof buf, "%.*f", -d, pow(10.0, d));
        else snprintf(buf, sizeof buf, "1e%d", d);
        text(c, ML - 8 - text_w(buf, 2), map_logy(pow(10.0, d), ly0, ly1, ph) - 5, buf, 2);
    }
}

/* The plot's frame. */
static void frame(canvas *c, int pw, int ph) {
    line(c, ML, MT, ML + pw, MT, 0, 0, 0, 1);
    line(c, ML, MT + ph, ML + pw, MT + ph, 0, 0, 0, 1);
    line(c, ML, MT, ML, MT + ph, 0, 0, 0, 1);
    line(c, ML + pw, MT, ML + pw, MT + ph, 0, 0, 0, 1);
}

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
    canvas c;
    nb_status s = canvas_new(W, H, &cpu, &img, &c);
    if (s) return s;
    int pw = W - ML - MR, ph = H - MT - MB;
#define MAPX(v) (ML + (int)lround(((v) - x0) / (x1 - x0) * pw))
#define MAPY(v) map_logy(v, ly0, ly1, ph)
    char buf[32];
    log_ygrid(&c, pw, ph, ly0, ly1);
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
    frame(&c, pw, ph);
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
    return canvas_done(path, cpu, img);
}

/* ---- several series over log-log axes (nb_image_plot_lines) ---------------------------------- */

#define LW 1040 /* image: the plot as above plus a legend column on the right */
#define LMR 260

/* 10 distinguishable colours (series k uses k % 10) */
static const float palette[10][3] = {
    {0.12f, 0.47f, 0.71f}, {1.00f, 0.50f, 0.05f}, {0.17f, 0.63f, 0.17f}, {0.84f, 0.15f, 0.16f},
    {0.58f, 0.40f, 0.74f}, {0.55f, 0.34f, 0.29f}, {0.89f, 0.47f, 0.76f}, {0.50f, 0.50f, 0.50f},
    {0.74f, 0.74f, 0.13f}, {0.09f, 0.75f, 0.81f}};

nb_status nb_image_plot_lines(const char *path, const char *title, const char *xlabel,
                              const char *ylabel, const double *x, int n,
                              const char *const *names, const double *y, int k) {
    if (!path || !x || !y || !names || n < 1 || k < 1)
        return nb_error(NB_ERR_INVALID_ARG, "line plot: no points or no series");
    for (int i = 0; i < n; i++)
        if (!(x[i] > 0 && isfinite(x[i])) || (i && x[i] <= x[i - 1]))
            return nb_error(NB_ERR_INVALID_ARG,
                            "line plot: x must be positive, finite and increasing (x[%d] = %g)", i,
                            x[i]);
    double lo = INFINITY, hi = -INFINITY;
    for (int i = 0; i < n * k; i++)
        if (y[i] > 0 && isfinite(y[i])) lo = fmin(lo, y[i]), hi = fmax(hi, y[i]);
    if (!(lo <= hi)) return nb_error(NB_ERR_INVALID_ARG, "line plot: no positive finite value");
    double lx0 = log10(x[0]), lx1 = log10(x[n - 1]);
    if (lx1 <= lx0) lx0 -= 0.5, lx1 += 0.5;
    double ly0 = floor(log10(lo)), ly1 = ceil(log10(hi));
    if (ly1 <= ly0) ly1 = ly0 + 1;
    nb_device *cpu;
    nb_tensor *img;
    canvas c;
    nb_status s = canvas_new(LW, H, &cpu, &img, &c);
    if (s) return s;
    int pw = LW - ML - LMR, ph = H - MT - MB;
#define MAPX(v) (ML + (int)lround((log10(v) - lx0) / (lx1 - lx0) * pw))
#define MAPY(v) map_logy(v, ly0, ly1, ph)
    char buf[32];
    log_ygrid(&c, pw, ph, ly0, ly1);
    /* x ticks at the points (a sweep's sizes or depths) */
    for (int i = 0; i < n; i++) {
        int xx = MAPX(x[i]);
        line(&c, xx, MT, xx, MT + ph, 0.9f, 0.9f, 0.9f, 1);
        snprintf(buf, sizeof buf, "%g", x[i]);
        text(&c, xx - text_w(buf, 2) / 2, MT + ph + 8, buf, 2);
    }
    frame(&c, pw, ph);
    for (int j = 0; j < k; j++) {
        const float *col = palette[j % 10];
        int have = 0, px0 = 0, py0 = 0;
        for (int i = 0; i < n; i++) {
            double v = y[(size_t)j * n + i];
            if (!(v > 0 && isfinite(v))) {
                have = 0;
                continue;
            }
            int xx = MAPX(x[i]), yy = MAPY(v);
            if (have) line(&c, px0, py0, xx, yy, col[0], col[1], col[2], 2);
            for (int a = -2; a <= 2; a++) /* a square marker: single points show too */
                for (int b = -2; b <= 2; b++) px(&c, xx + a, yy + b, col[0], col[1], col[2]);
            px0 = xx, py0 = yy, have = 1;
        }
        int ly = MT + 10 + j * 18, lx = ML + pw + 16;
        line(&c, lx, ly + 4, lx + 24, ly + 4, col[0], col[1], col[2], 3);
        text_rgb(&c, lx + 32, ly, names[j] ? names[j] : "?", 2, 0, 0, 0);
    }
    if (title) text(&c, ML, 8, title, 2);
    if (xlabel) text(&c, ML + pw / 2 - text_w(xlabel, 2) / 2, H - 14, xlabel, 2);
    if (ylabel) text(&c, ML + pw + 16, MT + ph - 12, ylabel, 2);
#undef MAPX
#undef MAPY
    return canvas_done(path, cpu, img);
}
