"""Writes the hand-edited variants of graft's rendered layer norm that main.cu times (bench/kmicro/README.md):
ln_gvec.cu    generic, scale and shift read as 8-wide vectors in the store stage
ln_gpre.cu    generic, scale and shift prefetched into registers before the reductions
ln_gfix3.cu   ln_gvec with the chunk count per lane known (3 for rows of 768: no breaks)
ln_lvec.cu    literal, scale and shift read as vectors
from ln_generic.cu and ln_literal.cu (graft's rendering at a221013). Run: python3 variants.py"""
import os

here = os.path.dirname(os.path.abspath(__file__))
GEN_ENTRY = "gr_g_a991a9569e24a8cc"
STORE = "{  // stage 2: store p3 (warp)"
VEC_GB = ("const gr_v8<float> gr_ga = *reinterpret_cast<const gr_v8<float>*>(p1 + {g}gr_r0);\n{i}"
          "const gr_v8<float> gr_gb = *reinterpret_cast<const gr_v8<float>*>(p2 + {b}gr_r0);\n")


def read(name):
    with open(os.path.join(here, name)) as f:
        return f.read()


def write(name, text):
    with open(os.path.join(here, name), "w") as f:
        f.write(text)


def whole_store(src):
    """(start, end) of the store stage of the whole-chunk version (the first of the two)."""
    i = src.index(STORE)
    return i, src.index(STORE, i + len(STORE))


def vector_gb(part, indent, g, b, gload, bload):
    decl = indent + "gr_v8<unsigned short> gr_sv;\n"
    assert decl in part
    part = part.replace(decl, decl + indent + VEC_GB.format(g=g, b=b, i=indent))
    return part.replace(gload, "gr_ga.v[gr_e]").replace(bload, "gr_gb.v[gr_e]")


gen = read("ln_generic.cu")
i, j = whole_store(gen)
gvec = gen[:i] + vector_gb(gen[i:j], " " * 12, "gr_dims.v[10] + ", "gr_dims.v[11] + ",
                           "p1[(gr_dims.v[10] + ri)]", "p2[(gr_dims.v[11] + ri)]") + gen[j:]
write("ln_gvec.cu", gvec.replace(GEN_ENTRY, "ln_gvec"))

k = gen.index("        float acc0;\n")
prefetch = """        float gr_pg[32], gr_pb[32];
#pragma unroll
        for (int gr_q = 0; gr_q < 4; gr_q++) {
          const int gr_r0 = min((gr_q * 32 + gr_lane) * 8, gr_ni - 8);
          const gr_v8<float> gr_ga = *reinterpret_cast<const gr_v8<float>*>(p1 + gr_dims.v[10] + gr_r0);
          const gr_v8<float> gr_gb = *reinterpret_cast<const gr_v8<float>*>(p2 + gr_dims.v[11] + gr_r0);
#pragma unroll
          for (int gr_e = 0; gr_e < 8; gr_e++) { gr_pg[gr_q * 8 + gr_e] = gr_ga.v[gr_e]; gr_pb[gr_q * 8 + gr_e] = gr_gb.v[gr_e]; }
        }
"""
pre_store = gen[i:j].replace("p1[(gr_dims.v[10] + ri)]", "gr_pg[gr_j]").replace("p2[(gr_dims.v[11] + ri)]", "gr_pb[gr_j]")
write("ln_gpre.cu", (gen[:k] + prefetch + gen[k:i] + pre_store + gen[j:]).replace(GEN_ENTRY, "ln_gpre"))

a = gvec.index("if (gr_ni % 8 == 0)")
b = gvec.index("} else {\n      for (long long lin", a)
fixed = gvec[a:b].replace("gr_q < 4", "gr_q < 3").replace("if (gr_r0 >= gr_ni) break;", "")
write("ln_gfix3.cu", (gvec[:a] + fixed + gvec[b:]).replace(GEN_ENTRY, "ln_gfix3"))

lit = read("ln_literal.cu")
i = lit.index(STORE)
j = lit.index("__syncwarp();", i)
lvec = lit[:i] + vector_gb(lit[i:j], " " * 10, "", "", "p1[(0LL + ri)]", "p2[(0LL + ri)]") + lit[j:]
write("ln_lvec.cu", lvec.replace("k42_layer_norm", "ln_lvec"))
