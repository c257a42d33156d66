// Writes small OpenEXR files with the OpenEXR library: every compression, HALF / FLOAT, RGBA / Y.
#include <ImfOutputFile.h>
#include <ImfTiledOutputFile.h>
#include <ImfChannelList.h>
#include <ImfFrameBuffer.h>
#include <ImfHeader.h>
#include <ImfCompressionAttribute.h>
#include <half.h>
#include <vector>
#include <cstdio>
#include <cstring>
using namespace Imf; using namespace Imath;
// value of channel ch at (x, y): exact in half for the HALF files
static float val(int ch, int x, int y) { if (y % 2 == 0) x = 0; return (float)((x * 7 + y * 13 + ch * 5) % 32) * 0.125f - 1.5f + (ch == 3 ? 3.0f : 0.0f); }
static void write(const char *path, Compression comp, PixelType pt, const char *chans, int W, int H, int x0, int y0, bool tiled) {
    Header hd(Box2i(V2i(0,0), V2i(W-1,H-1)), Box2i(V2i(x0,y0), V2i(x0+W-1,y0+H-1)));
    hd.compression() = comp;
    int nc = strlen(chans);
    for (int c = 0; c < nc; c++) hd.channels().insert(std::string(1, chans[c]), Channel(pt));
    std::vector<half> hb(W*H*nc); std::vector<float> fb(W*H*nc);
    FrameBuffer fbuf;
    for (int c = 0; c < nc; c++) {
        for (int y = 0; y < H; y++) for (int x = 0; x < W; x++) { float v = val(c, x, y); if (pt == FLOAT && c == 0) v += x / 1024.0f; hb[(y*W+x)*nc+c] = half(v); fb[(y*W+x)*nc+c] = v; }
        char *base = pt == HALF ? (char*)&hb[c] : (char*)&fb[c];
        size_t es = pt == HALF ? sizeof(half) : sizeof(float);
        base -= (x0 + (size_t)y0 * W) * nc * es;
        fbuf.insert(std::string(1, chans[c]), Slice(pt, base, es*nc, es*nc*W));
    }
    if (tiled) { hd.setTileDescription(TileDescription(8,8,ONE_LEVEL)); TiledOutputFile f(path, hd); f.setFrameBuffer(fbuf); f.writeTiles(0, f.numXTiles()-1, 0, f.numYTiles()-1); return; }
    OutputFile f(path, hd); f.setFrameBuffer(fbuf); f.writePixels(H);
}
int main() {
    write("none_half_rgba.exr", NO_COMPRESSION, HALF, "RGBA", 5, 3, 0, 0, false);
    write("rle_half_rgb.exr", RLE_COMPRESSION, HALF, "RGB", 19, 7, 0, 0, false);
    write("zips_float_rgb.exr", ZIPS_COMPRESSION, FLOAT, "RGB", 11, 5, 0, 0, false);
    write("zip_half_rgba.exr", ZIP_COMPRESSION, HALF, "RGBA", 23, 37, 2, -3, false);
    write("zip_float_y.exr", ZIP_COMPRESSION, FLOAT, "Y", 17, 20, 0, 0, false);
    write("none_float_ya.exr", NO_COMPRESSION, FLOAT, "YA", 4, 2, 0, 0, false);
    write("piz_half_rgb.exr", PIZ_COMPRESSION, HALF, "RGB", 8, 8, 0, 0, false);
    write("tiled_half_rgb.exr", NO_COMPRESSION, HALF, "RGB", 8, 8, 0, 0, true);
    return 0;
}
