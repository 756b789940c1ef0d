/* test_soak — a million runs of a small model in graph mode on the simulator,
 * with the input and a host scalar (the temperature) changing every run:
 * every run's output is checked against the closed form, every 1000th
 * bit for bit against an eager session, and host memory must stay flat (live
 * allocations constant after warm-up, RSS growing by less than a small bound).
 * Labelled `slow` (left out of scripts/test.sh); GRAFT_SOAK_RUNS overrides the
 * count. Prints one summary line for README's "Soak test". */
#include "check.h"
#include "util/util.h"
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { N = 64, WARMUP = 1000, EAGER_EVERY = 1000 };
#define RSS_BOUND_KIB 1024
/* ASan holds freed blocks in quarantine (up to 256 MiB): RSS says nothing there. */
#if defined(__SANITIZE_ADDRESS__)
#define RSS_CHECKED 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RSS_CHECKED 0
#endif
#endif
#ifndef RSS_CHECKED
#define RSS_CHECKED 1
#endif

/* Elementwise work and a reduction around a host scalar: y = (x / t + b) * x,
 * z = sum(y), with b[i] = i / 8 - 4 (exact in f32, so the closed form knows it). */
static char *soak_gir(void) {
    gr_strbuf sb;
    gr_sb_init(&sb);
    gr_sb_puts(&sb, "graft 1\ninput x: f32[64]\ninput temperature: f32[] @host\nconst b: f32[64] = [");
    for (int i = 0; i < N; i++) gr_sb_printf(&sb, "%s%g", i ? ", " : "", i / 8.0 - 4.0);
    gr_sb_puts(&sb, "]\ns = div(x, temperature)\nu = add(s, b)\ny = mul(u, x)\n"
                    "z = reduce_sum(y, axes=[0], keepdims=0)\noutput y\noutput z\n");
    return gr_sb_take(&sb);
}

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    long size = 0, resident = 0;
    int got = fscanf(f, "%ld %ld", &size, &resident);
    fclose(f);
    return got == 2 ? resident * (sysconf(_SC_PAGESIZE) / 1024) : -1;
}

static void make_input(long run, float *x, float *t) {
    uint32_t seed = (uint32_t)run * 2654435761u + 12345u;
    for (int i = 0; i < N; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((seed >> 8) & 0xffff) / 32768.0f - 1.0f;
    }
    *t = 0.25f + (float)(run % 13) * 0.5f; /* changes every run */
}

static gr_status run_once(gr_session_t s, const float *x, float t, float *y, float *z) {
    int64_t d = N;
    GR_TRY(gr_session_set_input(s, "x", GR_F32, 1, &d, x, sizeof(float) * N));
    GR_TRY(gr_session_set_input(s, "temperature", GR_F32, 0, NULL, &t, sizeof t));
    GR_TRY(gr_session_run(s));
    gr_output o;
    GR_TRY(gr_session_output(s, 0, &o));
    GR_TRY(gr_session_output_read(s, o, y, sizeof(float) * N));
    GR_TRY(gr_session_output(s, 1, &o));
    return gr_session_output_read(s, o, z, sizeof(float));
}

int main(void) {
    long runs = 1000000;
    const char *env = getenv("GRAFT_SOAK_RUNS");
    if (env && atol(env) > WARMUP) runs = atol(env);

    gr_graph_t g = NULL;
    char *text = soak_gir();
    CHECK(text != NULL);
    if (text) CHECK_OK(gr_graph_parse(text, "soak.gir", NULL, &g));
    gr_strfree(text);
    if (!g) return check_summary("test_soak");
    gr_session_options og, oe;
    gr_session_options_init(&og);
    gr_session_options_init(&oe);
    og.device = oe.device = GR_DEVICE_SIM;
    og.mode = GR_MODE_GRAPH;
    oe.mode = GR_MODE_EAGER;
    gr_session_t sg = NULL, se = NULL;
    CHECK_OK(gr_session_create(g, &og, &sg));
    CHECK_OK(gr_session_create(g, &oe, &se));
    gr_graph_destroy(g);
    if (!sg || !se) goto out;

    float b[N], y[N], z, ye[N], ze;
    for (int i = 0; i < N; i++) b[i] = (float)(i / 8.0 - 4.0);

    long live_after_warmup = 0, rss_after_warmup = 0, bad_closed = 0, bad_eager = 0, first_bad = -1;
    long captures_after_warmup = 0;
    double worst_rel = 0, t0 = 0;
    float x[N], t;
    for (long run = 0; run < runs; run++) {
        if (run == WARMUP) {
            live_after_warmup = gr_debug_live_allocs();
            rss_after_warmup = rss_kib();
            gr_run_stats st;
            CHECK_OK(gr_session_stats(sg, &st));
            captures_after_warmup = st.captures;
            gr_debug_fail_alloc_after(0); /* restarts the allocation count */
            t0 = gr_now_us();
        }
        make_input(run, x, &t);
        gr_status st = run_once(sg, x, t, y, &z);
        if (st != GR_OK) {
            CHECK_MSG(0, "run %ld: %s", run, gr_last_error());
            break;
        }
        /* closed form, in double, with f32 rounding allowed for relative to the
         * operands' size: a stale temperature or input shows at once */
        double sum = 0, sum_abs = 0;
        bool ok = true;
        for (int i = 0; i < N; i++) {
            double want = ((double)x[i] / t + b[i]) * x[i];
            double scale = (fabs((double)x[i] / t) + fabs(b[i])) * fabs(x[i]) + 1e-30;
            double err = fabs(y[i] - want);
            if (err > 1e-6 * scale) ok = false;
            if (err / scale > worst_rel) worst_rel = err / scale;
            sum += y[i];
            sum_abs += fabs(y[i]);
        }
        if (fabs(z - sum) > 1e-5 * (sum_abs + 1e-3)) ok = false;
        if (!ok && bad_closed++ == 0) first_bad = run;
        if (run % EAGER_EVERY == 0) {
            CHECK_OK(run_once(se, x, t, ye, &ze));
            if (memcmp(y, ye, sizeof y) || memcmp(&z, &ze, sizeof z)) bad_eager++;
        }
        if (run > WARMUP && run % 100000 == 0)
            CHECK_MSG(gr_debug_live_allocs() == live_after_warmup, "run %ld: %ld live allocations, %ld after warm-up", run,
                      gr_debug_live_allocs(), live_after_warmup);
    }
    double secs = (gr_now_us() - t0) * 1e-6;
    long allocs = gr_debug_fail_alloc_after(0); /* host allocations since warm-up (reported, not bounded) */
    long live_end = gr_debug_live_allocs(), rss_end = rss_kib();
    gr_run_stats st;
    CHECK_OK(gr_session_stats(sg, &st));
    CHECK_MSG(bad_closed == 0, "%ld runs differ from the closed form (first: run %ld)", bad_closed, first_bad);
    CHECK_MSG(bad_eager == 0, "%ld of %ld checked runs differ from eager mode", bad_eager, runs / EAGER_EVERY);
    CHECK_MSG(live_end == live_after_warmup, "live allocations %ld after warm-up, %ld at the end", live_after_warmup,
              live_end);
    CHECK_MSG(!RSS_CHECKED || (rss_end >= 0 && rss_end - rss_after_warmup < RSS_BOUND_KIB), "RSS grew from %ld KiB to %ld KiB",
              rss_after_warmup, rss_end);
    /* graph mode really replayed: no recapture after warm-up (the scalar is patched, not re-captured) */
    CHECK_MSG(st.captures == captures_after_warmup && st.segments_in_graphs == st.segments,
              "captures %ld after warm-up, %ld at the end; %d of %d segments in graphs", captures_after_warmup,
              st.captures, st.segments_in_graphs, st.segments);
    printf("soak: %ld graph-mode runs in %.1f s (%.1f us/run after warm-up), worst relative error %.2g, "
           "%ld eager comparisons, live allocations %ld -> %ld, %.1f host allocations/run, RSS %ld -> %ld KiB%s\n",
           runs, secs, secs * 1e6 / (double)(runs - WARMUP), worst_rel, runs / EAGER_EVERY + 1, live_after_warmup,
           live_end, (double)allocs / (double)(runs - WARMUP), rss_after_warmup, rss_end,
           RSS_CHECKED ? "" : " (not checked under ASan)");
out:
    gr_session_destroy(sg);
    gr_session_destroy(se);
    CHECK_MSG(gr_debug_live_allocs() == 0, "%ld allocations leaked", gr_debug_live_allocs());
    return check_summary("test_soak");
}
