/* device/sim — reference collectives over N simulated devices (tensor parallelism).
 *
 * One process drives N sim devices, one host thread per rank (runtime/tp.c). The simulator
 * runs work at submission, so a rank that reaches a collective must stop until every rank
 * has reached it: its thread blocks in the collective, as a CUDA stream waits in an NCCL
 * kernel for its peers. The threads take turns (one runs at a time, handing the turn on
 * when it blocks or finishes), so the simulator stays as deterministic as with one device
 * and no simulator state is touched by two threads at once. A turn passes in rank order.
 * Every rank enters each round of work (a barrier), so a rank that has not started yet is
 * never taken for one that stopped.
 *
 * The reference all-reduce sums in rank order in double (f64 accumulation for every
 * dtype), then rounds once into each rank's output; simulated time joins there too: a
 * collective ends on every rank at the last rank's arrival plus its transfer time; the all-gather stacks the ranks'
 * tensors along a new leading axis. A collective that some rank never reaches (it failed
 * or finished first) is an error on the ranks waiting in it, never a hang; so is one whose
 * ranks disagree on the kind, dtype or element count. */
#include "device/sim/sim-impl.h"
#include <pthread.h>
#include <stdio.h>
#include <string.h>

/* Simulated time of a collective: a ring over NVLink. Estimates, not measurements: NCCL's
 * small-message all-reduce latency on one NVLink host is about 10 us and its bus bandwidth
 * on H100/H200 pairs about 150 GB/s; scripts/tp-gpu-check.sh measures both on the GPUs. */
#define GR_SIM_COLL_LATENCY_US 10.0
#define GR_SIM_COLL_BUS_BYTES_PER_US 150.0e3

/* IDLE: not entered this round; DONE: left this round (it will make no more collectives) */
typedef enum { RANK_IDLE = 0, RANK_READY, RANK_RUNNING, RANK_WAITING, RANK_DONE } rank_state;

struct gr_sim_world {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int n;
    int refs;               /* devices still holding the world */
    int turn;               /* the rank whose thread may run, -1: none */
    /* a round: every rank enters (a barrier: a rank that has not started yet is not a rank
     * that stopped), works, leaves; the last to leave starts the next round */
    int round_entered, round_left;
    uint64_t round;
    rank_state *state;
    /* the collective being assembled: the ranks that arrived and what they passed */
    int arrived;
    uint64_t seq;           /* collectives completed or failed so far */
    gr_lib_kind kind;
    gr_dtype dtype;
    int64_t count;
    const void **src;
    void **dst;
    double max_arrive_us;   /* the latest rank's arrival at the collective being assembled */
    double done_us;         /* when the last completed collective ended (on every rank) */
    uint64_t failed_seq;    /* seq + 1 of the last collective that failed, 0: none */
    char failed_msg[512];
};

double gr_sim_collective_time(const gr_libcall *c) {
    double n = (double)(c->n > 0 ? c->n : 1);
    double bytes = (double)c->m * (double)gr_dtype_size(c->dtype);
    /* ring: an all-reduce moves 2(n-1)/n of the buffer per rank, an all-gather (n-1)/n of the result */
    double moved = c->kind == GR_LIB_ALL_REDUCE ? 2.0 * (n - 1.0) / n * bytes : (n - 1.0) * bytes;
    return c->n > 1 ? GR_SIM_COLL_LATENCY_US + moved / GR_SIM_COLL_BUS_BYTES_PER_US : 0.0;
}

static void world_free(gr_sim_world *w) {
    pthread_mutex_destroy(&w->mu);
    pthread_cond_destroy(&w->cv);
    gr_free(w->state, sizeof(rank_state) * (size_t)w->n);
    gr_free((void *)w->src, sizeof(void *) * (size_t)w->n);
    gr_free(w->dst, sizeof(void *) * (size_t)w->n);
    gr_free(w, sizeof *w);
}

gr_status gr_sim_comm_init(void **ctxs, int n, const void *unique_id, int first_rank, int world_size) {
    /* the simulator's ranks share one process's memory: no ranks elsewhere */
    if (unique_id || first_rank != 0 || world_size != n)
        return gr_error(GR_ERR_UNSUPPORTED, "sim: a communicator spans one process (ranks 0..%d), not ranks %d.. of %d", n - 1,
                        first_rank, world_size);
    for (int i = 0; i < n; i++)
        if (((gr_sim_ctx *)ctxs[i])->world) return gr_error(GR_ERR_INVALID, "sim: device %d already belongs to a communicator", i);
    gr_sim_world *w = gr_calloc(1, sizeof *w);
    if (!w) return gr_nomem();
    w->state = gr_calloc((size_t)n, sizeof(rank_state));
    w->src = gr_calloc((size_t)n, sizeof(void *));
    w->dst = gr_calloc((size_t)n, sizeof(void *));
    if (!w->state || !w->src || !w->dst) {
        gr_free(w->state, w->state ? sizeof(rank_state) * (size_t)n : 0);
        gr_free((void *)w->src, w->src ? sizeof(void *) * (size_t)n : 0);
        gr_free(w->dst, w->dst ? sizeof(void *) * (size_t)n : 0);
        gr_free(w, sizeof *w);
        return gr_nomem();
    }
    pthread_mutex_init(&w->mu, NULL);
    pthread_cond_init(&w->cv, NULL);
    w->n = n;
    w->refs = n;
    w->turn = -1;
    for (int i = 0; i < n; i++) {
        gr_sim_ctx *c = ctxs[i];
        c->world = w;
        c->rank = i;
    }
    return GR_OK;
}

void gr_sim_comm_release(gr_sim_ctx *c) {
    gr_sim_world *w = c->world;
    if (!w) return;
    c->world = NULL;
    pthread_mutex_lock(&w->mu);
    bool last = --w->refs == 0;
    pthread_mutex_unlock(&w->mu);
    if (last) world_free(w);
}

/* Gives the turn to the next ready rank after `from`. With none ready while ranks wait in a
 * collective, the missing ranks will never come: the collective fails and its waiters wake. */
static void pass_turn(gr_sim_world *w, int from) {
    w->turn = -1;
    for (int k = 1; k <= w->n; k++) {
        int r = (from + k) % w->n;
        if (w->state[r] == RANK_READY) {
            w->turn = r;
            break;
        }
    }
    if (w->turn < 0 && w->arrived > 0) {
        char waiting[128] = "", missing[128] = "";
        for (int r = 0; r < w->n; r++) {
            char *buf = w->state[r] == RANK_WAITING ? waiting : missing;
            size_t len = strlen(buf);
            snprintf(buf + len, 128 - len, "%s%d", len ? ", " : "", r);
        }
        snprintf(w->failed_msg, sizeof w->failed_msg,
                 "collective #%llu (%s): rank(s) %s wait in it, rank(s) %s stopped without reaching it",
                 (unsigned long long)w->seq + 1, w->kind == GR_LIB_ALL_REDUCE ? "all_reduce" : "all_gather", waiting, missing);
        w->failed_seq = w->seq + 1;
        w->seq++;
        w->arrived = 0;
        for (int r = 0; r < w->n; r++)
            if (w->state[r] == RANK_WAITING) {
                w->state[r] = RANK_READY;
                if (w->turn < 0) w->turn = r;
            }
    }
    pthread_cond_broadcast(&w->cv);
}

gr_status gr_sim_comm_enter(void *ctx) {
    gr_sim_ctx *c = ctx;
    gr_sim_world *w = c->world;
    if (!w) return GR_OK;
    pthread_mutex_lock(&w->mu);
    if (w->state[c->rank] != RANK_IDLE) {
        pthread_mutex_unlock(&w->mu);
        return gr_error(GR_ERR_INVALID, "sim: rank %d entered twice in one round", c->rank);
    }
    w->state[c->rank] = RANK_READY;
    uint64_t round = w->round;
    if (++w->round_entered == w->n) {
        w->turn = 0; /* every rank is here: they take turns from rank 0 */
        pthread_cond_broadcast(&w->cv);
    }
    while (w->round == round && (w->round_entered < w->n || w->turn != c->rank)) pthread_cond_wait(&w->cv, &w->mu);
    w->state[c->rank] = RANK_RUNNING;
    pthread_mutex_unlock(&w->mu);
    return GR_OK;
}

void gr_sim_comm_leave(void *ctx) {
    gr_sim_ctx *c = ctx;
    gr_sim_world *w = c->world;
    if (!w) return;
    pthread_mutex_lock(&w->mu);
    w->state[c->rank] = RANK_DONE;
    pass_turn(w, c->rank);
    if (++w->round_left == w->n) {
        w->round_entered = w->round_left = 0;
        w->round++;
        w->turn = -1;
        for (int r = 0; r < w->n; r++) w->state[r] = RANK_IDLE;
    }
    pthread_mutex_unlock(&w->mu);
}

/* every rank has arrived: the reference collective into every rank's output */
static gr_status perform(gr_sim_world *w) {
    size_t es = gr_dtype_size(w->dtype);
    int64_t count = w->count;
    if (w->kind == GR_LIB_ALL_GATHER) {
        for (int r = 0; r < w->n; r++)
            for (int k = 0; k < w->n; k++)
                if ((char *)w->dst[r] + (size_t)k * (size_t)count * es != w->src[k])
                    memmove((char *)w->dst[r] + (size_t)k * (size_t)count * es, w->src[k], (size_t)count * es);
        return GR_OK;
    }
    /* sums first, then the writes: an output may be its rank's input (in place) */
    double *acc = gr_malloc(sizeof(double) * (size_t)(count ? count : 1));
    if (!acc) return gr_nomem();
    for (int64_t i = 0; i < count; i++) {
        double sum = 0;
        for (int r = 0; r < w->n; r++) sum += gr_load_f64(w->src[r], w->dtype, i);
        acc[i] = sum;
    }
    for (int r = 0; r < w->n; r++)
        for (int64_t i = 0; i < count; i++) gr_store_f64(w->dst[r], w->dtype, i, acc[i]);
    gr_free(acc, sizeof(double) * (size_t)(count ? count : 1));
    return GR_OK;
}

gr_status gr_sim_comm_run(gr_sim_ctx *c, const gr_libcall *call, const gr_karg *args) {
    gr_sim_world *w = c->world;
    size_t bytes = (size_t)call->m * gr_dtype_size(call->dtype);
    if (!w || w->n == 1) {
        if (call->n != 1)
            return gr_error(GR_ERR_UNSUPPORTED, "libcall %s: a collective over %lld ranks on a device without a communicator "
                            "(tensor parallelism joins the ranks' devices)", call->name, (long long)call->n);
        if (args[2].ptr != args[0].ptr) memmove(args[2].ptr, args[0].ptr, bytes);
        c->coll_done_us = c->coll_arrive_us + gr_sim_collective_time(call);
        return GR_OK;
    }
    if (call->n != w->n)
        return gr_error(GR_ERR_INVALID, "libcall %s: a collective over %lld ranks, the communicator has %d", call->name,
                        (long long)call->n, w->n);
    pthread_mutex_lock(&w->mu);
    if (w->arrived == 0) {
        w->kind = call->kind;
        w->dtype = call->dtype;
        w->count = call->m;
        w->max_arrive_us = c->coll_arrive_us;
    } else if (w->kind != call->kind || w->dtype != call->dtype || w->count != call->m) {
        /* the ranks' programs differ: fail the collective for everyone in it */
        snprintf(w->failed_msg, sizeof w->failed_msg,
                 "collective #%llu: rank %d calls %s of %lld x %s, the ranks before it %s of %lld x %s",
                 (unsigned long long)w->seq + 1, c->rank, call->kind == GR_LIB_ALL_REDUCE ? "all_reduce" : "all_gather",
                 (long long)call->m, gr_dtype_name(call->dtype), w->kind == GR_LIB_ALL_REDUCE ? "all_reduce" : "all_gather",
                 (long long)w->count, gr_dtype_name(w->dtype));
        w->failed_seq = w->seq + 1;
        w->seq++;
        w->arrived = 0;
        for (int r = 0; r < w->n; r++)
            if (w->state[r] == RANK_WAITING) w->state[r] = RANK_READY;
        pthread_cond_broadcast(&w->cv);
        gr_status st = gr_error(GR_ERR_INVALID, "libcall %s: %s", call->name, w->failed_msg);
        pthread_mutex_unlock(&w->mu);
        return st;
    }
    w->src[c->rank] = args[0].ptr;
    w->dst[c->rank] = args[2].ptr;
    w->max_arrive_us = GR_MAX(w->max_arrive_us, c->coll_arrive_us);
    uint64_t mine = w->seq;
    if (++w->arrived == w->n) {
        gr_status st = perform(w);
        /* every rank leaves the collective together, after the last one arrived */
        w->done_us = w->max_arrive_us + gr_sim_collective_time(call);
        c->coll_done_us = w->done_us;
        w->seq++;
        w->arrived = 0;
        for (int r = 0; r < w->n; r++)
            if (w->state[r] == RANK_WAITING) w->state[r] = RANK_READY;
        pthread_mutex_unlock(&w->mu);
        return st;
    }
    w->state[c->rank] = RANK_WAITING;
    pass_turn(w, c->rank);
    while (!(w->turn == c->rank && w->seq > mine)) pthread_cond_wait(&w->cv, &w->mu);
    w->state[c->rank] = RANK_RUNNING;
    c->coll_done_us = w->done_us;
    gr_status st = GR_OK;
    if (w->failed_seq == mine + 1) st = gr_error(GR_ERR_DEVICE, "libcall %s: %s", call->name, w->failed_msg);
    pthread_mutex_unlock(&w->mu);
    return st;
}
