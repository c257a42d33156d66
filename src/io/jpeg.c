/* nb_image_read's JPEG decoder (image_read.h), written from ITU-T T.81 (ISO/IEC 10918-1) and JFIF:
 * baseline and extended sequential (SOF0 / SOF1) and progressive (SOF2) Huffman-coded frames of
 * 8-bit samples, gray (1 component) or YCbCr / RGB (3 components), any sampling factors 1..4
 * (4:4:4, 4:2:2, 4:2:0, 4:4:0, 4:1:1, ...), restart intervals; APPn / COM segments are skipped
 * (APP14 "Adobe" says whether 3 components are RGB or YCbCr).
 *
 * Every scan's entropy-coded data is decoded into per-component quantised DCT coefficients
 * (int16 [blocks][64], natural order); at EOI they are dequantised, inverse-transformed (float
 * separable IDCT, rounded to 8-bit samples as T.81 A.3.1 says), upsampled to the full resolution
 * (2:1: linear interpolation between centred sample sites, JFIF's siting and libjpeg's "fancy"
 * filter; other ratios: replication, as libjpeg) and converted YCbCr -> RGB (JFIF equations). The
 * same decode serves baseline (one pass, all 64 coefficients) and progressive scans (spectral
 * selection Ss..Se, successive approximation Ah / Al; T.81 G.1.2).
 *
 * Arithmetic coding, lossless and hierarchical frames, 12-bit samples, DNL heights and CMYK /
 * YCCK (4 components) are NB_ERR_UNSUPPORTED naming the feature; a truncated or corrupt file is
 * NB_ERR_IO naming the cause, never a read past the buffer. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "io/image_read.h"
#include "nabla/alloc.h"

typedef struct huff {
    int set;
    uint8_t val[256];
    uint16_t fast[1 << 9]; /* the next 9 bits -> (length << 8 | value), 0: longer code */
    int32_t maxcode[18];   /* largest code of each length (-1: none); [17] sentinel */
    int32_t valptr[17];    /* index into val of the first code of each length, minus that code */
} huff;

typedef struct comp {
    int id, h, v, tq;
    int cw, ch;       /* samples: ceil(X * h / hmax) x ceil(Y * v / vmax) */
    int bw, bh;       /* blocks stored: whole MCUs (mcux * h) x (mcuy * v) */
    int16_t *coef;    /* [bh * bw][64], natural order */
    uint16_t q[64];   /* the quantisation table at the component's first scan */
    int qset;
    int dc;           /* DC predictor */
    int seen;         /* scans that carried it (0: never: corrupt at EOI) */
} comp;

typedef struct bits {
    const unsigned char *p, *end;
    uint32_t acc; /* left-aligned */
    int n;        /* valid bits in acc */
    int fake;     /* of those, the last `fake` are zero padding past a marker or the end */
    int over;     /* padding was consumed: the scan's data ran out */
} bits;

typedef struct jpg {
    const nb_img_src *s;
    huff dc[4], ac[4];
    uint16_t q[4][64];
    int qset[4];
    int frame, progressive, X, Y, nc, hmax, vmax, mcux, mcuy;
    comp c[3];
    int restart; /* MCUs per restart interval, 0: none */
    int adobe;   /* APP14 transform: -1 none, 0 RGB, 1 YCbCr */
    int jfif;
    int eobrun;
    bits b;
    const char *bad; /* set by the scan decoder: why its data is corrupt */
} jpg;

static uint8_t zz[64]; /* zig-zag position -> natural index (row * 8 + column) */
static float idct_t[8][8]; /* [x][u] = C(u) / 2 * cos((2x + 1) u pi / 16) */

static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

static void tables_init(void) {
    int k = 0;
    for (int s = 0; s < 15; s++) { /* anti-diagonals row + column = s, alternating direction */
        int lo = s < 8 ? 0 : s - 7, hi = s < 8 ? s : 7;
        for (int i = 0; i <= hi - lo; i++) {
            int r = s % 2 ? lo + i : hi - i;
            zz[k++] = (uint8_t)(r * 8 + (s - r));
        }
    }
    for (int x = 0; x < 8; x++)
        for (int u = 0; u < 8; u++)
            idct_t[x][u] = (float)((u ? 0.5 : 0.5 / sqrt(2.0)) * cos((2 * x + 1) * u * M_PI / 16.0));
}

static nb_status unsupported(const jpg *j, const char *what) {
    return nb_error(NB_ERR_UNSUPPORTED, "'%s' is a JPEG file with %s, which nabla does not read (it reads baseline and "
                    "progressive Huffman-coded 8-bit gray and YCbCr / RGB JPEGs)", j->s->path, what);
}

static unsigned be16(const unsigned char *p) { return (unsigned)p[0] << 8 | p[1]; }

/* ---- segments -------------------------------------------------------------------------------- */

/* DHT: one or more tables (T.81 B.2.4.2) into Huffman decoding tables (C.2, F.2.2.3). */
static nb_status parse_dht(jpg *j, const unsigned char *p, size_t n) {
    while (n > 0) {
        if (n < 17) return nb_img_corrupt(j->s, "a DHT segment shorter than its counts");
        int tc = p[0] >> 4, th = p[0] & 15;
        if (tc > 1 || th > 3) return nb_img_corrupt(j->s, "a Huffman table of class %d, id %d", tc, th);
        size_t total = 0;
        for (int l = 0; l < 16; l++) total += p[1 + l];
        if (total > 256 || n < 17 + total) return nb_img_corrupt(j->s, "a DHT segment with %zu codes", total);
        huff *h = tc ? &j->ac[th] : &j->dc[th];
        memset(h, 0, sizeof *h);
        memcpy(h->val, p + 17, total);
        int32_t code = 0;
        int k = 0;
        for (int l = 1; l <= 16; l++) {
            int cnt = p[l];
            h->valptr[l] = k - code;
            h->maxcode[l] = cnt ? code + cnt - 1 : -1;
            for (int i = 0; i < cnt; i++, k++, code++) {
                if (code >= (1 << l)) return nb_img_corrupt(j->s, "a Huffman table with too many codes of %d bits", l);
                if (l <= 9) /* every 9-bit prefix that starts with this code */
                    for (int f = code << (9 - l), e = (code + 1) << (9 - l); f < e; f++)
                        h->fast[f] = (uint16_t)(l << 8 | h->val[k]);
            }
            code <<= 1;
        }
        h->maxcode[17] = INT32_MAX;
        h->set = 1;
        p += 17 + total, n -= 17 + total;
    }
    return NB_OK;
}

static nb_status parse_dqt(jpg *j, const unsigned char *p, size_t n) {
    while (n > 0) {
        int pq = p[0] >> 4, tq = p[0] & 15;
        size_t len = 1 + 64 * (size_t)(pq + 1);
        if (pq > 1 || tq > 3) return nb_img_corrupt(j->s, "a quantisation table of precision %d, id %d", pq, tq);
        if (n < len) return nb_img_corrupt(j->s, "a DQT segment shorter than its table");
        for (int k = 0; k < 64; k++) j->q[tq][zz[k]] = (uint16_t)(pq ? be16(p + 1 + 2 * k) : p[1 + k]);
        j->qset[tq] = 1;
        p += len, n -= len;
    }
    return NB_OK;
}

static nb_status parse_sof(jpg *j, int marker, const unsigned char *p, size_t n) {
    if (j->frame) return nb_img_corrupt(j->s, "two frame headers");
    if (n < 6) return nb_img_corrupt(j->s, "a frame header shorter than 6 bytes");
    int P = p[0], nc = p[5];
    j->Y = (int)be16(p + 1), j->X = (int)be16(p + 3);
    if (P == 12) return unsupported(j, "12-bit samples");
    if (P != 8) return nb_img_corrupt(j->s, "%d-bit samples", P);
    if (nc == 4) return unsupported(j, "4 components (CMYK / YCCK)");
    if (nc != 1 && nc != 3) return nb_img_corrupt(j->s, "%d components", nc);
    if (n < 6 + 3 * (size_t)nc) return nb_img_corrupt(j->s, "a frame header shorter than its components");
    if (j->Y == 0) return unsupported(j, "its height given by a DNL marker");
    if (!nb_img_size_ok(j->X, j->Y)) {
        nb_img dummy;
        return nb_img_alloc(j->s, j->X, j->Y, nc, &dummy); /* (the size error) */
    }
    j->nc = nc, j->progressive = marker == 0xC2, j->hmax = j->vmax = 1;
    for (int i = 0; i < nc; i++) {
        comp *c = &j->c[i];
        c->id = p[6 + 3 * i], c->h = p[7 + 3 * i] >> 4, c->v = p[7 + 3 * i] & 15, c->tq = p[8 + 3 * i];
        if (c->h < 1 || c->h > 4 || c->v < 1 || c->v > 4 || c->tq > 3)
            return nb_img_corrupt(j->s, "component %d: sampling %dx%d, table %d", c->id, c->h, c->v, c->tq);
        for (int k = 0; k < i; k++)
            if (j->c[k].id == c->id) return nb_img_corrupt(j->s, "two components with id %d", c->id);
        if (c->h > j->hmax) j->hmax = c->h;
        if (c->v > j->vmax) j->vmax = c->v;
    }
    j->mcux = (j->X + 8 * j->hmax - 1) / (8 * j->hmax), j->mcuy = (j->Y + 8 * j->vmax - 1) / (8 * j->vmax);
    for (int i = 0; i < nc; i++) {
        comp *c = &j->c[i];
        c->cw = (int)(((long long)j->X * c->h + j->hmax - 1) / j->hmax);
        c->ch = (int)(((long long)j->Y * c->v + j->vmax - 1) / j->vmax);
        c->bw = j->mcux * c->h, c->bh = j->mcuy * c->v;
    }
    j->frame = 1;
    return NB_OK;
}

/* ---- entropy-coded data ---------------------------------------------------------------------- */

/* Tops the bit buffer up to at least 25 bits: data bytes (FF 00 is a stuffed FF), then zero bytes
 * once a marker or the end of the file is reached (counted in `fake`). */
static void fill(bits *b) {
    while (b->n <= 24) {
        unsigned v = 0;
        if (b->p < b->end && *b->p != 0xFF) {
            v = *b->p++;
        } else if (b->p + 1 < b->end && b->p[1] == 0x00) {
            v = 0xFF, b->p += 2;
        } else {
            b->fake += 8;
        }
        b->acc |= (uint32_t)v << (24 - b->n);
        b->n += 8;
    }
}

static void used(bits *b, int k) {
    b->acc <<= k, b->n -= k;
    if (b->n < b->fake) b->over = 1, b->fake = b->n;
}

static int getbits(bits *b, int k) {
    if (k == 0) return 0;
    fill(b);
    int v = (int)(b->acc >> (32 - k));
    used(b, k);
    return v;
}

static int getbit(bits *b) { return getbits(b, 1); }

/* T.81 F.2.2.1 EXTEND: k magnitude bits -> a signed value. */
static int receive_extend(bits *b, int k) {
    if (k == 0) return 0;
    int v = getbits(b, k);
    return v < (1 << (k - 1)) ? v - (1 << k) + 1 : v;
}

/* The next Huffman-coded value (0..255), or -1 for a code the table lacks. */
static int decode(bits *b, const huff *h) {
    fill(b);
    unsigned f = h->fast[b->acc >> 23];
    if (f) {
        used(b, (int)(f >> 8));
        return (int)(f & 255);
    }
    for (int l = 10; l <= 16; l++) {
        int32_t code = (int32_t)(b->acc >> (32 - l));
        if (code <= h->maxcode[l]) {
            used(b, l);
            return h->val[h->valptr[l] + code];
        }
    }
    return -1;
}

/* One block of a scan into blk (natural order); 0 with j->bad set on corrupt data. */
static int decode_block(jpg *j, comp *c, const huff *dc, const huff *ac, int16_t *blk, int ss, int se, int ah,
                        int al) {
    bits *b = &j->b;
    if (ss == 0) { /* DC: first scan or refinement */
        if (ah == 0) {
            int t = decode(b, dc);
            if (t < 0 || t > 11) return j->bad = "a bad DC Huffman code", 0;
            c->dc += receive_extend(b, t);
            blk[0] = (int16_t)(c->dc * (1 << al));
        } else if (getbit(b)) {
            blk[0] = (int16_t)(blk[0] | (1 << al));
        }
        if (!j->progressive) ss = 1; /* (sequential: the ACs follow in the same block) */
        else return 1;
    }
    if (!j->progressive || ah == 0) { /* AC first scan (sequential: the only one) */
        if (j->eobrun > 0) {
            j->eobrun--;
            return 1;
        }
        for (int k = ss; k <= se; k++) {
            int rs = decode(b, ac);
            if (rs < 0) return j->bad = "a bad AC Huffman code", 0;
            int r = rs >> 4, sz = rs & 15;
            if (sz) {
                k += r;
                if (k > se) return j->bad = "AC coefficients past the end of the block", 0;
                blk[zz[k]] = (int16_t)(receive_extend(b, sz) * (1 << al));
            } else if (r == 15) {
                k += 15; /* ZRL: 16 zeros */
            } else {
                if (!j->progressive && r) return j->bad = "an EOB run in a sequential scan", 0;
                j->eobrun = (1 << r) - 1 + getbits(b, r);
                break;
            }
        }
        return 1;
    }
    /* AC refinement (T.81 G.1.2.3): one more bit of every nonzero coefficient in the band, and the
     * new coefficients (magnitude 1 << al) placed among the zeros */
    int p1 = 1 << al, m1 = -(1 << al), k = ss;
    if (j->eobrun == 0) {
        for (; k <= se; k++) {
            int rs = decode(b, ac);
            if (rs < 0) return j->bad = "a bad AC Huffman code", 0;
            int r = rs >> 4, sz = rs & 15, v = 0;
            if (sz) {
                if (sz != 1) return j->bad = "a refinement coefficient of magnitude other than 1", 0;
                v = getbit(b) ? p1 : m1;
            } else if (r != 15) {
                j->eobrun = (1 << r) + getbits(b, r);
                break;
            }
            for (; k <= se; k++) { /* skip r zeros (refining the nonzeros on the way), then place v */
                int16_t *co = &blk[zz[k]];
                if (*co) {
                    if (getbit(b) && (*co & p1) == 0) *co = (int16_t)(*co + (*co >= 0 ? p1 : m1));
                } else {
                    if (r == 0) {
                        if (v) *co = (int16_t)v;
                        break;
                    }
                    r--;
                }
            }
        }
    }
    if (j->eobrun > 0) { /* inside an EOB run: only the nonzeros are refined */
        for (; k <= se; k++) {
            int16_t *co = &blk[zz[k]];
            if (*co && getbit(b) && (*co & p1) == 0) *co = (int16_t)(*co + (*co >= 0 ? p1 : m1));
        }
        j->eobrun--;
    }
    return 1;
}

/* Moves b->p to the next marker (FF followed by neither 00 nor FF); 0 at the end of the file. */
static int to_marker(bits *b) {
    while (b->p + 1 < b->end) {
        if (b->p[0] == 0xFF && b->p[1] != 0x00 && b->p[1] != 0xFF) return 1;
        b->p++;
    }
    return 0;
}

/* SOS: the scan header (p, n bytes), then its entropy-coded data from *at up to the next marker
 * (*at: that marker). */
static nb_status parse_sos(jpg *j, const unsigned char *p, size_t n, size_t *at) {
    const nb_img_src *s = j->s;
    if (!j->frame) return nb_img_corrupt(s, "a scan before the frame header");
    int ns = n ? p[0] : 0;
    if (ns < 1 || ns > j->nc || n < 4 + 2 * (size_t)ns) return nb_img_corrupt(s, "a scan header of %d components", ns);
    comp *sc[3];
    const huff *dct[3], *act[3];
    int ss = p[1 + 2 * ns], se = p[2 + 2 * ns], ah = p[3 + 2 * ns] >> 4, al = p[3 + 2 * ns] & 15;
    if (j->progressive) {
        if (ss > se || se > 63 || (ss == 0 && se != 0) || (ss > 0 && ns != 1) || ah > 13 || al > 13)
            return nb_img_corrupt(s, "a progressive scan with Ss %d, Se %d, Ah %d, Al %d (%d components)", ss, se,
                                  ah, al, ns);
    } else if (ss != 0 || se != 63 || ah || al) {
        return nb_img_corrupt(s, "a sequential scan with Ss %d, Se %d, Ah %d, Al %d", ss, se, ah, al);
    }
    int blocks_per_mcu = 0;
    for (int i = 0; i < ns; i++) {
        int id = p[1 + 2 * i], td = p[2 + 2 * i] >> 4, ta = p[2 + 2 * i] & 15;
        sc[i] = NULL;
        for (int k = 0; k < j->nc; k++)
            if (j->c[k].id == id) sc[i] = &j->c[k];
        if (!sc[i]) return nb_img_corrupt(s, "a scan of component %d, which the frame lacks", id);
        for (int k = 0; k < i; k++)
            if (sc[k] == sc[i]) return nb_img_corrupt(s, "component %d twice in one scan", id);
        if (td > 3 || ta > 3) return nb_img_corrupt(s, "Huffman table ids %d / %d", td, ta);
        dct[i] = &j->dc[td], act[i] = &j->ac[ta];
        if ((ss == 0 && ah == 0 && !dct[i]->set) || (se > 0 && !act[i]->set))
            return nb_img_corrupt(s, "a scan using an undefined Huffman table");
        blocks_per_mcu += sc[i]->h * sc[i]->v;
    }
    if (ns > 1 && blocks_per_mcu > 10) return nb_img_corrupt(s, "%d blocks in an MCU (at most 10)", blocks_per_mcu);
    /* the first scan allocates the coefficients: each block takes at least one bit of this scan,
     * so a short file cannot claim a huge image */
    size_t nblk = ns == 1 ? (size_t)((sc[0]->cw + 7) / 8) * (size_t)((sc[0]->ch + 7) / 8)
                          : (size_t)j->mcux * (size_t)j->mcuy * (size_t)blocks_per_mcu;
    for (int i = 0; i < ns; i++) {
        comp *c = sc[i];
        if (!c->coef) {
            if (s->n - *at < nblk / 8) return nb_img_truncated(s, "scan data");
            size_t bytes = (size_t)c->bw * (size_t)c->bh * 64 * sizeof(int16_t);
            c->coef = nb_alloc(bytes, 64);
            if (!c->coef) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_image_read: no host memory for JPEG coefficients");
            memset(c->coef, 0, bytes);
        }
        if (!c->qset) {
            if (!j->qset[c->tq])
                return nb_img_corrupt(s, "component %d uses undefined quantisation table %d", c->id, c->tq);
            memcpy(c->q, j->q[c->tq], sizeof c->q), c->qset = 1;
        }
        c->seen++, c->dc = 0;
    }
    /* MCUs: interleaved (ns > 1): each has h x v blocks of every component; one component: one
     * block each, over that component's own block grid */
    int mw, mh;
    if (ns == 1) mw = (sc[0]->cw + 7) / 8, mh = (sc[0]->ch + 7) / 8;
    else mw = j->mcux, mh = j->mcuy;
    bits *b = &j->b;
    memset(b, 0, sizeof *b);
    b->p = s->p + *at, b->end = s->p + s->n;
    j->eobrun = 0, j->bad = NULL;
    long long total = (long long)mw * mh, done = 0;
    int rst = 0;
    for (int my = 0; my < mh; my++) {
        for (int mx = 0; mx < mw; mx++, done++) {
            if (j->restart && done > 0 && done % j->restart == 0) { /* a restart marker: reset the decoder */
                b->acc = 0, b->n = 0, b->fake = 0;
                if (!to_marker(b)) return nb_img_truncated(s, "scan data (no restart marker)");
                if (b->p[1] != 0xD0 + rst)
                    return nb_img_corrupt(s, "marker %02X where restart marker RST%d belongs", b->p[1], rst);
                b->p += 2, rst = (rst + 1) & 7, j->eobrun = 0;
                for (int i = 0; i < ns; i++) sc[i]->dc = 0;
            }
            for (int i = 0; i < ns; i++) {
                comp *c = sc[i];
                int hh = ns == 1 ? 1 : c->h, vv = ns == 1 ? 1 : c->v;
                for (int y = 0; y < vv; y++)
                    for (int x = 0; x < hh; x++) {
                        size_t bi = (size_t)(my * vv + y) * (size_t)c->bw + (size_t)(mx * hh + x);
                        if (!decode_block(j, c, dct[i], act[i], c->coef + bi * 64, ss, se, ah, al))
                            return nb_img_corrupt(s, "%s", j->bad);
                    }
            }
            if (b->over) {
                if (!to_marker(b)) return nb_img_truncated(s, "scan data");
                return nb_img_corrupt(s, "a scan whose data ends after %lld of %lld MCUs", done, total);
            }
        }
    }
    if (!to_marker(b)) return nb_img_truncated(s, "no marker after the scan data");
    *at = (size_t)(b->p - s->p);
    return NB_OK;
}

/* ---- samples --------------------------------------------------------------------------------- */

/* Dequantises and inverse-transforms every block of c into plane (bw * 8 x bh * 8 bytes). */
static void idct_comp(const comp *c, unsigned char *plane) {
    size_t stride = (size_t)c->bw * 8;
    for (int by = 0; by < c->bh; by++)
        for (int bx = 0; bx < c->bw; bx++) {
            const int16_t *blk = c->coef + ((size_t)by * c->bw + bx) * 64;
            float tmp[8][8]; /* [v][x]: rows transformed */
            for (int v = 0; v < 8; v++) {
                float f[8];
                int any = 0;
                for (int u = 0; u < 8; u++) f[u] = (float)(blk[v * 8 + u] * (int)c->q[v * 8 + u]), any |= f[u] != 0.0f;
                for (int x = 0; x < 8; x++) {
                    float a = 0.0f;
                    if (any)
                        for (int u = 0; u < 8; u++) a += idct_t[x][u] * f[u];
                    tmp[v][x] = a;
                }
            }
            unsigned char *o = plane + (size_t)by * 8 * stride + (size_t)bx * 8;
            for (int y = 0; y < 8; y++)
                for (int x = 0; x < 8; x++) {
                    float a = 128.0f;
                    for (int v = 0; v < 8; v++) a += idct_t[y][v] * tmp[v][x];
                    long r = lrintf(a);
                    o[(size_t)y * stride + x] = (unsigned char)(r < 0 ? 0 : r > 255 ? 255 : r);
                }
        }
}

/* Full-resolution sample positions of a subsampled plane: output i (of `full`) reads samples i0,
 * i0 + 1 (clamped to n - 1) with weight w of the second. At half resolution (fmax = 2 f) that is
 * linear interpolation between centred sample sites (JFIF), libjpeg's "fancy" triangle filter;
 * at other ratios each sample is replicated, as libjpeg does, so that pixels match djpeg's. */
static void resample_coords(int full, int n, int f, int fmax, int *i0, float *w) {
    for (int i = 0; i < full; i++) {
        if (fmax != 2 * f) {
            int k = (int)((long long)i * f / fmax);
            i0[i] = k < n ? k : n - 1, w[i] = 0.0f;
            continue;
        }
        float u = ((float)i + 0.5f) * 0.5f - 0.5f;
        if (u < 0.0f) u = 0.0f;
        int k = (int)u;
        if (k >= n - 1) k = n - 1, u = (float)k;
        i0[i] = k, w[i] = u - (float)k;
    }
}

/* Samples of every component into im->px (channel k = component k, values 0..255), then colour
 * conversion and scaling to [0, 1]. */
static nb_status output(jpg *j, nb_img *im) {
    int X = j->X, Y = j->Y, nc = j->nc;
    for (int k = 0; k < nc; k++) {
        comp *c = &j->c[k];
        size_t pbytes = (size_t)c->bw * 8 * (size_t)c->bh * 8;
        unsigned char *plane = nb_alloc(pbytes, 64);
        int *xi = nb_alloc(sizeof(int) * (size_t)(X + Y), 64);
        float *xw = nb_alloc(sizeof(float) * (size_t)(X + Y), 64);
        if (!plane || !xi || !xw) {
            if (plane) nb_free(plane, pbytes);
            if (xi) nb_free(xi, sizeof(int) * (size_t)(X + Y));
            if (xw) nb_free(xw, sizeof(float) * (size_t)(X + Y));
            return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_image_read: no host memory for a JPEG component");
        }
        idct_comp(c, plane);
        resample_coords(X, c->cw, c->h, j->hmax, xi, xw);
        resample_coords(Y, c->ch, c->v, j->vmax, xi + X, xw + X);
        size_t stride = (size_t)c->bw * 8;
        for (int y = 0; y < Y; y++) {
            int y0 = xi[X + y], y1 = y0 + 1 < c->ch ? y0 + 1 : y0;
            float wy = xw[X + y];
            const unsigned char *r0 = plane + (size_t)y0 * stride, *r1 = plane + (size_t)y1 * stride;
            float *o = im->px + (size_t)y * X * nc + k;
            for (int x = 0; x < X; x++, o += nc) {
                int x0 = xi[x], x1 = x0 + 1 < c->cw ? x0 + 1 : x0;
                float wx = xw[x];
                float a = r0[x0] + wx * (r0[x1] - r0[x0]), b = r1[x0] + wx * (r1[x1] - r1[x0]);
                *o = a + wy * (b - a);
            }
        }
        nb_free(plane, pbytes);
        nb_free(xi, sizeof(int) * (size_t)(X + Y));
        nb_free(xw, sizeof(float) * (size_t)(X + Y));
    }
    /* 3 components are YCbCr unless an Adobe marker says RGB, or (no JFIF, no Adobe) their ids are
     * 'R', 'G', 'B' */
    int rgb = nc == 3 && (j->adobe == 0 || (j->adobe < 0 && !j->jfif && j->c[0].id == 'R' && j->c[1].id == 'G' &&
                                             j->c[2].id == 'B'));
    size_t npx = (size_t)X * Y;
    for (size_t i = 0; i < npx; i++) {
        float *o = im->px + i * (size_t)nc;
        float v[3];
        if (nc == 3 && !rgb) {
            float yy = o[0], cb = o[1] - 128.0f, cr = o[2] - 128.0f;
            v[0] = yy + 1.402f * cr, v[1] = yy - 0.344136f * cb - 0.714136f * cr, v[2] = yy + 1.772f * cb;
        } else {
            for (int k = 0; k < nc; k++) v[k] = o[k];
        }
        for (int k = 0; k < nc; k++) {
            long r = lrintf(v[k]);
            o[k] = (float)(r < 0 ? 0 : r > 255 ? 255 : r) / 255.0f;
        }
    }
    return NB_OK;
}

/* ---- the file -------------------------------------------------------------------------------- */

static nb_status decode_markers(jpg *j, nb_img *im) {
    const nb_img_src *s = j->s;
    const unsigned char *p = s->p;
    size_t at = 2; /* (past SOI) */
    for (;;) {
        /* a marker: FF, any fill FFs, the code */
        if (at >= s->n) return nb_img_truncated(s, "no end-of-image marker");
        if (p[at] != 0xFF) return nb_img_corrupt(s, "byte %02X at offset %zu where a marker belongs", p[at], at);
        while (at < s->n && p[at] == 0xFF) at++;
        if (at >= s->n) return nb_img_truncated(s, "no end-of-image marker");
        int m = p[at++];
        if (m == 0xD9) break; /* EOI */
        if (m >= 0xD0 && m <= 0xD7) continue; /* (a stray RSTn between segments: nothing to read) */
        if (m == 0x01) continue; /* TEM */
        if (m == 0xD8) return nb_img_corrupt(s, "a second start-of-image marker");
        if (s->n - at < 2) return nb_img_truncated(s, "a segment's length");
        size_t len = be16(p + at);
        if (len < 2) return nb_img_corrupt(s, "a segment of length %zu", len);
        if (s->n - at < len) return nb_img_truncated(s, "a segment shorter than its length");
        const unsigned char *d = p + at + 2;
        size_t n = len - 2;
        nb_status st = NB_OK;
        if (m == 0xC0 || m == 0xC1 || m == 0xC2) {
            st = parse_sof(j, m, d, n);
        } else if (m == 0xC3) {
            return unsupported(j, "lossless coding (SOF3)");
        } else if (m == 0xC5 || m == 0xC6 || m == 0xC7 || m == 0xDE || m == 0xDF) {
            return unsupported(j, "hierarchical (differential) coding");
        } else if ((m >= 0xC9 && m <= 0xCB) || (m >= 0xCD && m <= 0xCF) || m == 0xCC) {
            return unsupported(j, "arithmetic coding");
        } else if (m == 0xC4) {
            st = parse_dht(j, d, n);
        } else if (m == 0xDB) {
            st = parse_dqt(j, d, n);
        } else if (m == 0xDD) {
            if (n < 2) return nb_img_corrupt(s, "a DRI segment shorter than 2 bytes");
            j->restart = (int)be16(d);
        } else if (m == 0xDA) {
            at += len;
            st = parse_sos(j, d, n, &at);
            if (st) return st;
            continue; /* (at: the marker after the scan data) */
        } else if (m == 0xDC) {
            return unsupported(j, "a DNL marker");
        } else if (m == 0xE0 && n >= 5 && !memcmp(d, "JFIF\0", 5)) {
            j->jfif = 1;
        } else if (m == 0xEE && n >= 12 && !memcmp(d, "Adobe", 5)) {
            j->adobe = d[11];
        } else if (m < 0xE0 && m != 0xC8) {
            return nb_img_corrupt(s, "marker %02X", m);
        } /* (APPn, COM, JPG extensions: skipped) */
        if (st) return st;
        at += len;
    }
    if (!j->frame) return nb_img_corrupt(s, "no frame header");
    for (int k = 0; k < j->nc; k++)
        if (!j->c[k].seen) return nb_img_truncated(s, "a component no scan carries");
    nb_status st = nb_img_alloc(s, j->X, j->Y, j->nc, im);
    if (st) return st;
    im->srgb = 1;
    st = output(j, im);
    if (st) nb_free(im->px, nb_img_bytes(im)), im->px = NULL;
    return st;
}

nb_status nb_img_decode_jpeg(const nb_img_src *s, nb_img *im) {
    pthread_once(&tables_once, tables_init);
    jpg *j = nb_alloc(sizeof *j, 64);
    if (!j) return nb_error(NB_ERR_OUT_OF_MEMORY, "nb_image_read: no host memory for a JPEG decoder");
    memset(j, 0, sizeof *j);
    j->s = s, j->adobe = -1;
    nb_status st = decode_markers(j, im);
    for (int k = 0; k < 3; k++)
        if (j->c[k].coef) nb_free(j->c[k].coef, (size_t)j->c[k].bw * (size_t)j->c[k].bh * 64 * sizeof(int16_t));
    nb_free(j, sizeof *j);
    return st;
}
