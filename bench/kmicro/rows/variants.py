"""Derives the hand-edited variants of this folder's kernels (README.md) instead of keeping edited copies:
v_g1.cu, v_g2.cu, v_g4.cu from v_g0.cu (graft's generated generic plain layer norm), and v_hand.cu, v_mw.cu
(the hand kernels without the residual add) from ../hand.cu and mw.cu. Run: python3 variants.py"""
import os

here = os.path.dirname(os.path.abspath(__file__))


def read(name):
    with open(os.path.join(here, name)) as f:
        return f.read()


def write(name, text):
    with open(os.path.join(here, name), "w") as f:
        f.write(text)


def edit(text, old, new):
    if old not in text:
        raise SystemExit("variants.py: %r not found" % old)
    return text.replace(old, new)


g0 = read("v_g0.cu")
# the row length a literal 768
g1 = edit(g0, "const int gr_ni = (int)gr_dims.v[3];", "const int gr_ni = 768;").replace("ln_g0", "ln_g1")
write("v_g1.cu", g1)
# ... and the division by the deviation as a multiply by its reciprocal (changes bits: timing only)
write("v_g2.cu", edit(g1, "const float v12 = (float)gr_div(v5, v11);", "const float v12 = v5 * __frcp_rn(v11);").replace("ln_g1", "ln_g2"))
# the vector fill reads only the chunks the row has
write("v_g4.cu", edit(g0, "const int gr_r0 = min((gr_q * 32 + gr_lane) * 8, gr_ni - 8);",
                      "if (gr_q * 256 >= gr_ni) break;\n            const int gr_r0 = (gr_q * 32 + gr_lane) * 8;").replace("ln_g0", "ln_g4"))
# the hand kernels without the residual add
h = read("../hand.cu")
h = h.replace("ln_hand(", "lnp_hand(")
h = edit(h, ", const unsigned short* __restrict__ y) {", ") {")
h = edit(h, "c[q] = *reinterpret_cast<const v8h*>(y + row * 768 + r0);", "")
h = edit(h, "v[j] = bf2f(f2bf(bf2f(a[j/8].v[j%8]) + bf2f(c[j/8].v[j%8])));", "v[j] = bf2f(a[j/8].v[j%8]);")
write("v_hand.cu", h)
m = read("mw.cu")
m = edit(m, ", const unsigned short* __restrict__ y) {", ") {")
m = edit(m, "c[q] = *reinterpret_cast<const v8h*>(y + row * 768 + r0);", "")
m = edit(m, "v[q][e] = bf2f(f2bf(bf2f(a[q].v[e]) + bf2f(c[q].v[e])));", "v[q][e] = bf2f(a[q].v[e]);")
m = m.replace("body<1>(n, g, b, o, x, y)", "body<1>(n, g, b, o, x)").replace("body<3>(n, g, b, o, x, y)", "body<3>(n, g, b, o, x)")
m = m.replace(", const unsigned short* x, const unsigned short* y)", ", const unsigned short* x)")
write("v_mw.cu", m.replace("ln_mw1", "lnp_mw1").replace("ln_mw3", "lnp_mw3"))
