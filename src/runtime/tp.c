/* runtime/tp — tensor parallelism: one session per rank, driven in lockstep by one process.
 *
 * Process model (docs/design.md, "Tensor parallelism"): one process, one device per rank and
 * one host thread per rank (started with the session, kept for its life). Each rank's session compiles its own graph (passes/
 * shard.c) with the collectives as library calls, so they are enqueued on the rank's stream and
 * captured inside its segments' CUDA graphs like any other step. A rank thread blocks where its
 * device would (the simulator: in a collective until its peers arrive; CUDA: NCCL's enqueue never
 * waits for peers, its kernel does), so every rank's graph replays interleave correctly at the
 * collectives. The communicator is bootstrapped from one unique id (device layer), so ranks in
 * other processes or hosts are the same code with ranks offset.
 *
 * The caller's session is rank 0's; the others hang off it (s->tp). */
#include "runtime/runtime-impl.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>

struct gr_rt_workers;
struct gr_rt_tp {
    int n;
    struct gr_rt_workers *workers; /* one host thread per rank (below) */
    gr_session_t *ranks;    /* ranks[0] is the session holding this */
    char *report;           /* the shard pass's splits and collectives (explain) */
    gr_shard_stats stats;   /* rank 0's */
    size_t *rank_weight_bytes;
};

int gr_rt_tp_ranks(gr_session_t s) { return s && s->tp ? s->tp->n : 1; }
gr_session_t gr_rt_tp_rank(gr_session_t s, int r) {
    if (!s) return NULL;
    if (!s->tp) return r == 0 ? s : NULL;
    return r >= 0 && r < s->tp->n ? s->tp->ranks[r] : NULL;
}

/* ==== devices ================================================================================= */
static void destroy_devices(gr_device **devs, int n) {
    for (int i = 0; i < n; i++) {
        gr_device_destroy(devs[i]);
        devs[i] = NULL;
    }
}

static gr_status open_kind(gr_device_kind kind, const char *cache_dir, int n, gr_device **devs) {
    gr_status st = GR_OK;
    for (int r = 0; r < n && st == GR_OK; r++)
        st = kind == GR_DEVICE_SIM ? gr_device_sim_create(&devs[r]) : gr_device_cuda_create_ordinal(cache_dir, r, &devs[r]);
    if (st == GR_OK) st = gr_dev_comm_init(devs, n);
    if (st != GR_OK) destroy_devices(devs, n);
    return st;
}

/* n devices joined into one communicator: CUDA GPUs 0..n-1 with NCCL, or n simulated ones */
static gr_status open_devices(const gr_session_options *o, int n, gr_device **devs) {
    if (o->device == GR_DEVICE_SIM || o->device == GR_DEVICE_CUDA) {
        gr_status st = open_kind(o->device, o->cache_dir, n, devs);
        if (st != GR_OK && o->device == GR_DEVICE_CUDA) return gr_error_prefix(st, "tensor parallelism over %d GPUs", n);
        return st;
    }
    gr_status st = open_kind(GR_DEVICE_CUDA, o->cache_dir, n, devs);
    if (st == GR_OK || st == GR_ERR_NOMEM) return st;
    /* always said, as gr_device_open says it: the user asked for the best devices */
    fprintf(stderr, "graft: note: tensor parallelism over %d GPUs is not possible here (%s); running %d simulated devices\n", n,
            gr_last_error(), n);
    gr_error_clear();
    return open_kind(GR_DEVICE_SIM, o->cache_dir, n, devs);
}

/* ==== creation ================================================================================ */
static void workers_stop(struct gr_rt_tp *tp);
static gr_status workers_start(struct gr_rt_tp *tp);
static void tp_free(struct gr_rt_tp *tp) {
    if (!tp) return;
    workers_stop(tp);
    gr_free(tp->ranks, sizeof(gr_session_t) * (size_t)tp->n);
    gr_free(tp->rank_weight_bytes, sizeof(size_t) * (size_t)tp->n);
    gr_strfree(tp->report);
    gr_free(tp, sizeof *tp);
}

gr_status gr_rt_tp_create(gr_graph *graph, const gr_session_options *opt, gr_session_t *out) {
    if (!out) return gr_error(GR_ERR_INVALID, "gr_session_create: out is NULL");
    *out = NULL;
    if (!graph) return gr_error(GR_ERR_INVALID, "gr_session_create: graph is NULL");
    int n = opt->tp;
    if (n > GR_DEV_MAX_RANKS) return gr_error(GR_ERR_INVALID, "tp %d: at most %d ranks", n, GR_DEV_MAX_RANKS);
    GR_TRY(gr_ir_verify(graph));
    gr_graph *src = NULL, *parts[GR_DEV_MAX_RANKS] = {0};
    gr_device *devs[GR_DEV_MAX_RANKS] = {0};
    gr_strbuf report;
    gr_sb_init(&report);
    struct gr_rt_tp *tp = gr_calloc(1, sizeof *tp);
    gr_status st = tp ? GR_OK : gr_nomem();
    if (st == GR_OK) {
        tp->n = n;
        tp->ranks = gr_calloc((size_t)n, sizeof(gr_session_t));
        tp->rank_weight_bytes = gr_calloc((size_t)n, sizeof(size_t));
        if (!tp->ranks || !tp->rank_weight_bytes) st = gr_nomem();
    }
    /* every rank's graph from the inferred unsplit one: errors name the user's node before any device opens */
    if (st == GR_OK) st = gr_ir_graph_clone(graph, &src);
    if (st == GR_OK) st = gr_ir_infer_shapes(src);
    /* weights made by generators (random_normal in .gir) become the constants the rules split */
    if (st == GR_OK) st = gr_pass_fold_constants(src);
    for (int r = 0; r < n && st == GR_OK; r++) {
        gr_shard_stats ss;
        st = gr_pass_shard(src, n, r, &parts[r], r == 0 ? &report : NULL, &ss);
        if (st != GR_OK) break;
        if (r == 0) tp->stats = ss;
        tp->rank_weight_bytes[r] = ss.rank_weight_bytes;
    }
    gr_ir_graph_destroy(src);
    if (st == GR_OK && report.failed) st = gr_nomem();
    if (st == GR_OK) st = open_devices(opt, n, devs);
    gr_session_options ro = *opt;
    ro.tp = 0;
    ro.device = devs[0] ? devs[0]->kind : opt->device;
    for (int r = 0; r < n && st == GR_OK; r++) {
        gr_device *d = devs[r];
        devs[r] = NULL; /* the session takes it, also on failure */
        st = gr_dev_thread_bind(d);
        if (st != GR_OK) {
            gr_device_destroy(d);
            break;
        }
        st = gr_rt_session_create_on(parts[r], &ro, d, &tp->ranks[r]);
        if (st != GR_OK) st = gr_error_prefix(st, "tensor parallelism: rank %d of %d", r, n);
    }
    for (int r = 0; r < n; r++) gr_ir_graph_destroy(parts[r]);
    destroy_devices(devs, n);
    if (st != GR_OK) {
        for (int r = n - 1; tp && tp->ranks && r >= 0; r--) gr_session_destroy(tp->ranks[r]);
        tp_free(tp);
        gr_sb_free(&report);
        return st;
    }
    tp->report = gr_sb_take(&report);
    if (!tp->report || (st = workers_start(tp)) != GR_OK) {
        if (!tp->report) st = gr_nomem();
        for (int r = n - 1; r >= 0; r--) gr_session_destroy(tp->ranks[r]);
        tp_free(tp);
        return st;
    }
    gr_session_t s = tp->ranks[0];
    s->tp = tp;
    *out = s;
    return GR_OK;
}

void gr_rt_tp_destroy(gr_session_t s) {
    struct gr_rt_tp *tp = s->tp;
    s->tp = NULL;
    if (!tp) return;
    if (s->pending) {
        s->tp = tp;
        (void)gr_rt_tp_wait(s);
        s->tp = NULL;
    }
    workers_stop(tp);
    for (int r = tp->n - 1; r >= 1; r--) {
        (void)gr_dev_thread_bind(tp->ranks[r]->dev);
        gr_session_destroy(tp->ranks[r]);
    }
    (void)gr_dev_thread_bind(s->dev);
    tp_free(tp);
}

/* ==== running the ranks ======================================================================= */
/* One worker thread per rank for the session's life: a run costs two condition-variable
 * hand-offs per rank instead of creating and joining threads (tens of us per run, which a
 * replayed decode step would feel). */
typedef enum { JOB_RUN = 0, JOB_WAIT } job_kind;
typedef struct {
    struct gr_rt_tp *tp;
    int rank;
    uint64_t seen;      /* last job taken */
    gr_status st;
    char msg[1024];
} rank_worker;

struct gr_rt_workers {
    pthread_mutex_t mu;
    pthread_cond_t job_cv, done_cv;
    uint64_t seq;       /* jobs posted */
    job_kind kind;
    int done;           /* ranks finished with job seq */
    bool stop;
    int started;        /* threads running */
    pthread_t threads[GR_DEV_MAX_RANKS];
    rank_worker w[GR_DEV_MAX_RANKS];
};

static void *worker_main(void *arg) {
    rank_worker *w = arg;
    struct gr_rt_workers *k = w->tp->workers;
    gr_session_t s = w->tp->ranks[w->rank];
    for (;;) {
        pthread_mutex_lock(&k->mu);
        while (!k->stop && k->seq == w->seen) pthread_cond_wait(&k->job_cv, &k->mu);
        if (k->stop) {
            pthread_mutex_unlock(&k->mu);
            return NULL;
        }
        w->seen = k->seq;
        job_kind kind = k->kind;
        pthread_mutex_unlock(&k->mu);
        gr_status st = gr_dev_comm_enter(s->dev);
        if (st == GR_OK) {
            st = kind == JOB_RUN ? gr_rt_run_one(s) : gr_rt_wait_one(s);
            gr_dev_comm_leave(s->dev);
        }
        w->st = st;
        if (st != GR_OK) snprintf(w->msg, sizeof w->msg, "%s", gr_last_error());
        pthread_mutex_lock(&k->mu);
        if (++k->done == w->tp->n) pthread_cond_signal(&k->done_cv);
        pthread_mutex_unlock(&k->mu);
    }
}

static void workers_stop(struct gr_rt_tp *tp) {
    struct gr_rt_workers *k = tp->workers;
    if (!k) return;
    pthread_mutex_lock(&k->mu);
    k->stop = true;
    pthread_cond_broadcast(&k->job_cv);
    pthread_mutex_unlock(&k->mu);
    for (int r = 0; r < k->started; r++) pthread_join(k->threads[r], NULL);
    pthread_mutex_destroy(&k->mu);
    pthread_cond_destroy(&k->job_cv);
    pthread_cond_destroy(&k->done_cv);
    gr_free(k, sizeof *k);
    tp->workers = NULL;
}

static gr_status workers_start(struct gr_rt_tp *tp) {
    struct gr_rt_workers *k = gr_calloc(1, sizeof *k);
    if (!k) return gr_nomem();
    pthread_mutex_init(&k->mu, NULL);
    pthread_cond_init(&k->job_cv, NULL);
    pthread_cond_init(&k->done_cv, NULL);
    tp->workers = k;
    for (int r = 0; r < tp->n; r++) {
        k->w[r] = (rank_worker){.tp = tp, .rank = r};
        if (pthread_create(&k->threads[r], NULL, worker_main, &k->w[r]) != 0) {
            workers_stop(tp);
            return gr_error(GR_ERR_DEVICE, "tensor parallelism: cannot start the host thread of rank %d", r);
        }
        k->started++;
    }
    return GR_OK;
}

/* The job on every rank at once, each on its thread; the first rank's own error wins over the
 * errors of ranks that only saw it fail (a collective it never reached). */
static gr_status all_ranks(gr_session_t s, job_kind kind) {
    struct gr_rt_tp *tp = s->tp;
    struct gr_rt_workers *k = tp->workers;
    pthread_mutex_lock(&k->mu);
    k->kind = kind;
    k->done = 0;
    for (int r = 0; r < tp->n; r++) k->w[r].st = GR_OK;
    k->seq++;
    pthread_cond_broadcast(&k->job_cv);
    while (k->done < tp->n) pthread_cond_wait(&k->done_cv, &k->mu);
    pthread_mutex_unlock(&k->mu);
    /* the main thread goes on with rank 0's device (outputs, explain) */
    (void)gr_dev_thread_bind(s->dev);
    int first = -1;
    for (int r = 0; r < tp->n; r++) {
        const rank_worker *w = &k->w[r];
        if (w->st == GR_OK) continue;
        if (first < 0 || (strstr(k->w[first].msg, "stopped without reaching it") && !strstr(w->msg, "stopped without reaching it")))
            first = r;
    }
    if (first < 0) return GR_OK;
    return gr_error(k->w[first].st, "rank %d of %d: %s", first, tp->n, k->w[first].msg);
}

gr_status gr_rt_tp_run(gr_session_t s) {
    if (s->pending) GR_TRY(gr_rt_tp_wait(s));
    return all_ranks(s, JOB_RUN);
}

gr_status gr_rt_tp_wait(gr_session_t s) { return all_ranks(s, JOB_WAIT); }

gr_status gr_rt_tp_set_input(gr_session_t s, const char *name, gr_dtype dtype, int ndim, const int64_t *dims, const void *data,
                             size_t nbytes) {
    struct gr_rt_tp *tp = s->tp;
    if (s->pending) GR_TRY(gr_rt_tp_wait(s));
    gr_status st = GR_OK;
    for (int r = tp->n - 1; r >= 0 && st == GR_OK; r--) { /* rank 0 last: its device stays current */
        st = gr_dev_thread_bind(tp->ranks[r]->dev);
        if (st != GR_OK) break;
        st = gr_rt_set_input_one(tp->ranks[r], name, dtype, ndim, dims, data, nbytes);
        if (st != GR_OK && r > 0) st = gr_error_prefix(st, "rank %d", r);
    }
    return st;
}

void gr_rt_tp_explain(gr_session_t s, gr_strbuf *sb) {
    struct gr_rt_tp *tp = s->tp;
    gr_sb_puts(sb, tp->report ? tp->report : "");
    gr_sb_puts(sb, "  weights per rank:");
    for (int r = 0; r < tp->n; r++) gr_sb_printf(sb, " %.2f MB", (double)tp->rank_weight_bytes[r] / 1e6);
    gr_sb_printf(sb, "\n  devices:");
    for (int r = 0; r < tp->n; r++) gr_sb_printf(sb, " [%d] %s", r, gr_dev_name(tp->ranks[r]->dev));
    gr_sb_puts(sb, "\n  (the plan below is rank 0's)\n");
}
