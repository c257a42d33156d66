"""Pure-Python (no numpy / torch) forward of guided-diffusion's UNetModel for tiny configs: an
independent check of nabla's UNet structure where torch is not installed.

  python3 unet_ref_pure.py CKPT X.bin N T.bin Y.bin

CKPT: a nabla UNet checkpoint (safetensors, config in the metadata); X.bin [N,C,S,S] and T.bin [N]
raw f32 inputs; Y.bin nabla's output for them (bench/unet_forward.c, build/bench/unet_forward). Exit 0 when every
parameter is used and max |nabla - python| <= 1e-4 max(1, max|out|). Slow: keep S <= 8..16.
"""
import json, math, struct, sys
def st_read(path):
    d = open(path, 'rb').read(); n = struct.unpack('<Q', d[:8])[0]; h = json.loads(d[8:8+n]); meta = h.pop('__metadata__')
    out = {}
    for k, e in h.items():
        a, b = e['data_offsets']; vals = list(struct.unpack('<%df' % ((b-a)//4), d[8+n+a:8+n+b])); out[k] = (e['shape'], vals)
    return out, meta
P, meta = st_read(sys.argv[1])
cfg = {k: v for k, v in meta.items()}
S = int(cfg['image_size']); inc = int(cfg['in_channels']); outc = int(cfg['out_channels']); mc = int(cfg['model_channels'])
mult = [int(x) for x in cfg['channel_mult'].split(',')]; nrb = int(cfg['num_res_blocks'])
attn = [int(x) for x in cfg['attention_resolutions'].split(',') if x]; hc = int(cfg['num_head_channels'])
conv_rs = int(cfg['conv_resample']); G = int(cfg['num_groups'])
used = set()
def p(name): used.add(name); return P[name]
# tensors: (C, H, W, flat list)
def conv(x, wn, bn, stride=1, pad=None):
    C, H, W, xv = x; (O, Ci, K, _), w = p(wn)[0], p(wn)[1]; b = p(bn)[1]
    if pad is None: pad = K // 2
    Ho = (H + 2*pad - K)//stride + 1; Wo = (W + 2*pad - K)//stride + 1
    out = [0.0] * (O*Ho*Wo)
    for o in range(O):
        for yo in range(Ho):
            for xo in range(Wo):
                acc = b[o]
                for c in range(Ci):
                    for i in range(K):
                        yi = yo*stride + i - pad
                        if yi < 0 or yi >= H: continue
                        for j in range(K):
                            xi = xo*stride + j - pad
                            if xi < 0 or xi >= W: continue
                            acc += w[((o*Ci + c)*K + i)*K + j] * xv[(c*H + yi)*W + xi]
                out[(o*Ho + yo)*Wo + xo] = acc
    return (O, Ho, Wo, out)
def conv1d(x, wn, bn):  # [O, C, 1] weight on [C, H, W]
    C, H, W, xv = x; (O, Ci, _), w = p(wn)[0], p(wn)[1]; b = p(bn)[1]; T = H*W
    return (O, H, W, [b[o] + sum(w[o*Ci + c] * xv[c*T + t] for c in range(Ci)) for o in range(O) for t in range(T)])
def gn(x, wn, bn):
    C, H, W, xv = x; g = p(wn)[1]; be = p(bn)[1]; cpg = C // G; T = H*W; out = [0.0]*len(xv)
    for gi in range(G):
        vals = xv[gi*cpg*T:(gi+1)*cpg*T]; m = sum(vals)/len(vals); v = sum((a-m)**2 for a in vals)/len(vals); r = 1/math.sqrt(v + 1e-5)
        for c in range(gi*cpg, (gi+1)*cpg):
            for t in range(T): out[c*T+t] = (xv[c*T+t]-m)*r*g[c] + be[c]
    return (C, H, W, out)
def silu(x): return (x[0], x[1], x[2], [a/(1+math.exp(-a)) for a in x[3]])
def add(a, b): return (a[0], a[1], a[2], [u+v for u, v in zip(a[3], b[3])])
def linear(v, wn, bn):
    (O, F), w = p(wn)[0], p(wn)[1]; b = p(bn)[1]
    return [b[o] + sum(w[o*F+f]*v[f] for f in range(F)) for o in range(O)]
def vsilu(v): return [a/(1+math.exp(-a)) for a in v]
def res(x, emb, pre):
    h = conv(silu(gn(x, pre+'.in_layers.0.weight', pre+'.in_layers.0.bias')), pre+'.in_layers.2.weight', pre+'.in_layers.2.bias')
    e = linear(vsilu(emb), pre+'.emb_layers.1.weight', pre+'.emb_layers.1.bias'); T = h[1]*h[2]
    h = (h[0], h[1], h[2], [h[3][i] + e[i//T] for i in range(len(h[3]))])
    h = conv(silu(gn(h, pre+'.out_layers.0.weight', pre+'.out_layers.0.bias')), pre+'.out_layers.3.weight', pre+'.out_layers.3.bias')
    skip = conv(x, pre+'.skip_connection.weight', pre+'.skip_connection.bias', 1, 0) if pre+'.skip_connection.weight' in P else x
    return add(skip, h)
def attnb(x, pre):
    C, H, W, xv = x; T = H*W; heads = C // hc; d = hc
    qkv = conv1d(gn(x, pre+'.norm.weight', pre+'.norm.bias'), pre+'.qkv.weight', pre+'.qkv.bias')[3]
    a = [0.0]*(C*T); sc = 1/math.sqrt(math.sqrt(d))
    for hh in range(heads):
        base = hh*3*d
        q = lambda c, t: qkv[(base+c)*T+t]; k = lambda c, t: qkv[(base+d+c)*T+t]; v = lambda c, t: qkv[(base+2*d+c)*T+t]
        for t in range(T):
            logits = [sum(q(c, t)*sc*k(c, s)*sc for c in range(d)) for s in range(T)]; m = max(logits)
            ws = [math.exp(l-m) for l in logits]; z = sum(ws); ws = [w/z for w in ws]
            for c in range(d): a[(hh*d+c)*T+t] = sum(ws[s]*v(c, s) for s in range(T))
    return add(x, conv1d((C, H, W, a), pre+'.proj_out.weight', pre+'.proj_out.bias'))
def avgpool(x):
    C, H, W, xv = x
    return (C, H//2, W//2, [(xv[(c*H+2*y)*W+2*z]+xv[(c*H+2*y)*W+2*z+1]+xv[(c*H+2*y+1)*W+2*z]+xv[(c*H+2*y+1)*W+2*z+1])/4 for c in range(C) for y in range(H//2) for z in range(W//2)])
def up(x):
    C, H, W, xv = x
    return (C, 2*H, 2*W, [xv[(c*H+y//2)*W+z//2] for c in range(C) for y in range(2*H) for z in range(2*W)])
def cat(a, b): return (a[0]+b[0], a[1], a[2], a[3]+b[3])
def forward(x, t):
    half = mc//2; fr = [math.exp(-math.log(10000)*i/half) for i in range(half)]
    emb = [math.cos(t*f) for f in fr] + [math.sin(t*f) for f in fr]
    emb = linear(vsilu(linear(emb, 'time_embed.0.weight', 'time_embed.0.bias')), 'time_embed.2.weight', 'time_embed.2.bias')
    h = conv(x, 'input_blocks.0.0.weight', 'input_blocks.0.0.bias'); hs = [h]; k = 1; ds = 1
    for l, m in enumerate(mult):
        for _ in range(nrb):
            h = res(h, emb, 'input_blocks.%d.0' % k)
            if S//ds in attn: h = attnb(h, 'input_blocks.%d.1' % k)
            hs.append(h); k += 1
        if l != len(mult)-1:
            h = conv(h, 'input_blocks.%d.0.op.weight' % k, 'input_blocks.%d.0.op.bias' % k, 2, 1) if conv_rs else avgpool(h)
            hs.append(h); k += 1; ds *= 2
    h = res(h, emb, 'middle_block.0'); h = attnb(h, 'middle_block.1'); h = res(h, emb, 'middle_block.2')
    k = 0
    for l, m in list(enumerate(mult))[::-1]:
        for i in range(nrb+1):
            h = res(cat(h, hs.pop()), emb, 'output_blocks.%d.0' % k); j = 1
            if S//ds in attn: h = attnb(h, 'output_blocks.%d.1' % k); j = 2
            if l and i == nrb:
                h = up(h); ds //= 2
                if conv_rs: h = conv(h, 'output_blocks.%d.%d.conv.weight' % (k, j), 'output_blocks.%d.%d.conv.bias' % (k, j))
            k += 1
    return conv(silu(gn(h, 'out.0.weight', 'out.0.bias')), 'out.2.weight', 'out.2.bias')
n = int(sys.argv[3]); img = inc*S*S
xs = struct.unpack('<%df' % (n*img), open(sys.argv[2], 'rb').read()); ts = struct.unpack('<%df' % n, open(sys.argv[4], 'rb').read())
ys = struct.unpack('<%df' % (n*outc*S*S), open(sys.argv[5], 'rb').read())
worst = 0; scale = 0
for b in range(n):
    y = forward((inc, S, S, list(xs[b*img:(b+1)*img])), ts[b])[3]
    for i, v in enumerate(y):
        worst = max(worst, abs(v - ys[b*outc*S*S+i])); scale = max(scale, abs(v))
print('params used %d of %d; max |nabla - pure python| = %.3g, max |out| = %.3g' % (len(used), len(P), worst, scale))
sys.exit(0 if worst <= 1e-4*max(1, scale) and len(used) == len(P) else 1)
