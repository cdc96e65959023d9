/* The native switch: AF_PACKET ports read in batches (recvmmsg) by an ingress thread,
 * the traffic manager (strict-priority queues per port with depths, per-queue rates set at
 * enqueue as BMv2 1.15 does, an optional port rate shared by the queues at dequeue) and an
 * egress thread timing departures; frames leave in batches (sendmmsg). Frames for the CPU
 * port wait in a ring that the control plane drains (gf_sw_packet_in). No Python runs here. */
#ifndef GF_SWITCH_H
#define GF_SWITCH_H

#include <errno.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define GF_PORTS 512
#define GF_PRIOS 8
#define GF_BATCH 32
#define GF_CPU_RING 1024

typedef struct gf_item {
    struct gf_item *next;
    uint64_t s[GF_NSLOTS];
    uint32_t len, payload_off, size;
    uint64_t enq_ts, enq_qdepth;
    double send_us;
    uint8_t data[];
} gf_item;

typedef struct {
    gf_item *head, *tail; uint32_t n, depth;
    double rate; int per_bit; double last_send; uint32_t last_size;
} gf_queue;

typedef struct {
    int fd; gf_queue q[GF_PRIOS]; uint32_t queued;
    double rate; int per_bit; double free_at;
} gf_port;

enum { ST_RX, ST_TX, ST_QUEUE_FULL, ST_BAD_PRIO, ST_TO_CPU, ST_NO_PORT, ST_CPU_DROP, ST_DIGESTS, ST_FAILED,
       ST_OVERSIZE, ST_SEND_ERROR, ST_NSTATS };

typedef struct gf_switch {
    gf_prog *p;
    int nprio, cpu_port, stop, wake[2];
    gf_port ports[GF_PORTS];
    pthread_mutex_t tm; pthread_cond_t tm_cond;
    pthread_t ingress, egress;
    uint64_t stats[ST_NSTATS];
    uint64_t qdrops[GF_PORTS][GF_PRIOS];
    pthread_mutex_t cpu_lock; pthread_cond_t cpu_cond;
    uint8_t *cpu_frames[GF_CPU_RING]; uint32_t cpu_lens[GF_CPU_RING]; uint8_t cpu_kinds[GF_CPU_RING];
    uint32_t cpu_head, cpu_tail;
} gf_switch;

static inline double gf_now_us(void) {
    struct timespec ts; clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static inline double gf_service_us(double rate, int per_bit, uint32_t size) {
    return per_bit ? (double)size * 8e6 / rate : 1e6 / rate;
}

/* A frame for the CPU port (kind 0) or a packet's digest words (kind 1) for the control plane. */
static void gf_to_cpu(gf_switch *sw, const uint8_t *frame, uint32_t len, uint8_t kind) {
    pthread_mutex_lock(&sw->cpu_lock);
    if (sw->cpu_tail - sw->cpu_head < GF_CPU_RING) {
        uint32_t i = sw->cpu_tail % GF_CPU_RING;
        sw->cpu_frames[i] = malloc(len); memcpy(sw->cpu_frames[i], frame, len);
        sw->cpu_lens[i] = len; sw->cpu_kinds[i] = kind; sw->cpu_tail++;
        sw->stats[kind ? ST_DIGESTS : ST_TO_CPU]++;
        pthread_cond_signal(&sw->cpu_cond);
    } else sw->stats[ST_CPU_DROP]++;
    pthread_mutex_unlock(&sw->cpu_lock);
}

/* Per-thread batches of frames to send, per port. */
typedef struct {
    struct mmsghdr msgs[GF_BATCH]; struct iovec iov[GF_BATCH];
    uint8_t frames[GF_BATCH][GF_MAXFRAME]; int ports[GF_BATCH]; int n;
} gf_txbatch;

static void gf_flush(gf_switch *sw, gf_txbatch *tx) {
    int i = 0;
    while (i < tx->n) {
        int port = tx->ports[i], j = i;
        while (j < tx->n && tx->ports[j] == port) j++;
        int fd = sw->ports[port].fd, done = 0, sent = 0, failed = 0;
        while (fd >= 0 && done < j - i) {
            int r = sendmmsg(fd, &tx->msgs[i + done], j - i - done, 0);
            if (r > 0) { done += r; sent += r; continue; }
            if (r < 0 && errno == EINTR) continue;
            /* the first frame left failed: over the port's MTU (EMSGSIZE), a full buffer, a
             * link down; it is counted and dropped, the frames after it still go */
            done++; failed++;
        }
        __atomic_fetch_add(&sw->stats[ST_TX], (uint64_t)sent, __ATOMIC_RELAXED);
        if (failed) __atomic_fetch_add(&sw->stats[ST_SEND_ERROR], (uint64_t)failed, __ATOMIC_RELAXED);
        i = j;
    }
    tx->n = 0;
}

/* The packet's digest and log words, when it has any, to the control plane. */
static inline void gf_words_to_cpu(gf_switch *sw, const gf_ctx *c) {
    if (c->ndig) gf_to_cpu(sw, (const uint8_t *)c->dig, c->ndig * (uint32_t)sizeof(uint64_t), 1);
}

static void gf_depart(gf_switch *sw, gf_ctx *c, uint32_t port, uint64_t enq_ts, uint64_t enq_qdepth,
                      uint64_t deq_td, uint64_t deq_qdepth, gf_txbatch *tx, int depth);

/* The E2E clones of the packet `c` whose deparsed frame is in send slot k (they leave at once,
 * without queueing, as on the Python pipeline); the slot then holding its `len` bytes, or -1
 * when a clone failed (the packet fails with it). */
static int gf_depart_clones(gf_switch *sw, gf_ctx *c, int k, int len, gf_txbatch *tx, int depth) {
    gf_mgroup *sess = gf_session(sw->p, c->s[GF_CLONE_SESSION]);
    if (!sess) return k;
    uint8_t *copy = malloc(c->full_len);
    memcpy(copy, tx->frames[k], c->full_len);
    gf_ctx *t = malloc(sizeof(gf_ctx));
    int failed = 0;
    for (uint32_t i = 0; i < sess->n && !failed; i++) {
        gf_clone_setup(t, c, copy, c->full_len, (uint32_t)c->s[GF_STD_INGRESS_PORT], 2, sess->rids[i], sess->truncate);
        gf_words_to_cpu(sw, t);
        if (t->fault) { __atomic_fetch_add(&sw->stats[ST_FAILED], 1, __ATOMIC_RELAXED); failed = 1; break; }
        gf_depart(sw, t, sess->ports[i], 0, 0, 0, 0, tx, depth + 1);
    }
    free(t);
    if (tx->n == GF_BATCH) gf_flush(sw, tx);
    if (len > 0) memcpy(tx->frames[tx->n], copy, (size_t)len);
    free(copy);
    return failed ? -1 : tx->n;
}

/* Egress for one packet leaving its queue; the frame joins the send batch. */
static void gf_depart(gf_switch *sw, gf_ctx *c, uint32_t port, uint64_t enq_ts, uint64_t enq_qdepth,
                      uint64_t deq_td, uint64_t deq_qdepth, gf_txbatch *tx, int depth) {
    if (tx->n == GF_BATCH) gf_flush(sw, tx);
    int k = tx->n;
    int len = gf_egress_run(c, port, enq_ts, enq_qdepth, deq_td, deq_qdepth, tx->frames[k]);
    gf_words_to_cpu(sw, c);  /* log words */
    if (c->fault) { __atomic_fetch_add(&sw->stats[ST_FAILED], 1, __ATOMIC_RELAXED); return; }
    if (c->s[GF_CLONE] == 2 && depth < GF_MAX_CLONE_DEPTH && (k = gf_depart_clones(sw, c, k, len, tx, depth)) < 0)
        return;
    if (len < 0) return;
    if ((int)port == sw->cpu_port) { gf_to_cpu(sw, tx->frames[k], (uint32_t)len, 0); return; }
    if (port >= GF_PORTS || sw->ports[port].fd < 0) { __atomic_fetch_add(&sw->stats[ST_NO_PORT], 1, __ATOMIC_RELAXED); return; }
    tx->iov[k].iov_base = tx->frames[k]; tx->iov[k].iov_len = (size_t)len;
    memset(&tx->msgs[k], 0, sizeof(struct mmsghdr));
    tx->msgs[k].msg_hdr.msg_iov = &tx->iov[k]; tx->msgs[k].msg_hdr.msg_iovlen = 1;
    tx->ports[k] = (int)port; tx->n++;
}

/* One job from ingress: leave at once when the port is idle, else queue (or drop). */
static void gf_job(gf_switch *sw, gf_ctx *c, uint32_t port, uint32_t prio, uint64_t now, gf_txbatch *tx) {
    if (port >= GF_PORTS) { __atomic_fetch_add(&sw->stats[ST_NO_PORT], 1, __ATOMIC_RELAXED); return; }
    pthread_mutex_lock(&sw->tm);
    gf_port *pt = &sw->ports[port];
    if (prio >= (uint32_t)sw->nprio) {
        sw->stats[ST_BAD_PRIO]++; sw->qdrops[port][prio < GF_PRIOS ? prio : GF_PRIOS - 1]++;
        pthread_mutex_unlock(&sw->tm); return;
    }
    gf_queue *q = &pt->q[prio];
    double t = (double)now;
    double send = q->rate > 0 ? q->last_send + gf_service_us(q->rate, q->per_bit, q->last_size) : q->last_send;
    if (send < t) send = t;
    if (!pt->queued && pt->free_at <= t && send <= t) {  /* idle: straight through */
        q->last_send = t; q->last_size = c->len;
        if (pt->rate > 0) pt->free_at = t + gf_service_us(pt->rate, pt->per_bit, c->len);
        pthread_mutex_unlock(&sw->tm);
        gf_depart(sw, c, port, now, 0, 0, 0, tx, 0);
        return;
    }
    if (q->n >= q->depth) { sw->stats[ST_QUEUE_FULL]++; sw->qdrops[port][prio]++; pthread_mutex_unlock(&sw->tm); return; }
    gf_item *it = malloc(sizeof(gf_item) + c->len);
    memcpy(it->s, c->s, sizeof it->s);
    memcpy(it->data, c->data, c->len);
    it->len = c->len; it->payload_off = c->payload_off; it->size = c->len;
    it->enq_ts = now; it->enq_qdepth = q->n; it->send_us = send; it->next = 0;
    q->last_send = send; q->last_size = c->len;
    if (q->tail) q->tail->next = it; else q->head = it;
    q->tail = it; q->n++; pt->queued++;
    pthread_cond_signal(&sw->tm_cond);
    pthread_mutex_unlock(&sw->tm);
}

/* Ingress of one frame: the pipeline, then every copy it makes to the traffic manager. */
static void gf_receive(gf_switch *sw, gf_ctx *c, gf_ctx *r, const uint8_t *frame, uint32_t len, uint32_t port,
                       gf_txbatch *tx) {
    uint64_t now = (uint64_t)gf_now_us();
    __atomic_fetch_add(&sw->stats[ST_RX], 1, __ATOMIC_RELAXED);
    if (len > GF_MAXFRAME) { __atomic_fetch_add(&sw->stats[ST_OVERSIZE], 1, __ATOMIC_RELAXED); return; }
    gf_ingress_run(c, frame, len, port, now);
    gf_words_to_cpu(sw, c);
    if (c->fault) { __atomic_fetch_add(&sw->stats[ST_FAILED], 1, __ATOMIC_RELAXED); return; }
    uint32_t prio = (uint32_t)c->s[GF_STD_PRIORITY];
    gf_prog *p = sw->p;
    if (c->s[GF_CLONE] == 1) {  /* I2E clones: the original frame parsed anew, queued at the packet's priority */
        gf_mgroup *sess = gf_session(p, c->s[GF_CLONE_SESSION]);
        for (uint32_t i = 0; sess && i < sess->n; i++) {
            gf_clone_setup(r, c, frame, len, port, 1, sess->rids[i], sess->truncate);
            r->s[GF_STD_EGRESS_SPEC] = sess->ports[i];
            gf_words_to_cpu(sw, r);
            if (r->fault) { __atomic_fetch_add(&sw->stats[ST_FAILED], 1, __ATOMIC_RELAXED); return; }
            gf_job(sw, r, sess->ports[i], prio, now, tx);
        }
    }
    uint64_t grp = c->s[GF_STD_MCAST_GRP];
    if (!grp) {
        if (c->s[GF_STD_EGRESS_SPEC] != GF_DROP) gf_job(sw, c, (uint32_t)c->s[GF_STD_EGRESS_SPEC], prio, now, tx);
        return;
    }
    uint32_t n = grp < p->ngroups ? p->groups[grp].n : 0;
    for (uint32_t i = 0; i < n; i++) {
        memcpy(r, c, sizeof(gf_ctx));
        r->s[GF_STD_EGRESS_RID] = p->groups[grp].rids[i];
        r->s[GF_STD_INSTANCE_TYPE] = 5; r->s[GF_TRUNCATE] = 0;  /* a new packet: not cut */
        gf_job(sw, r, p->groups[grp].ports[i], prio, now, tx);
    }
}

static void *gf_ingress_loop(void *arg) {
    gf_switch *sw = arg;
    gf_ctx *c = calloc(1, sizeof(gf_ctx)), *r = calloc(1, sizeof(gf_ctx));
    gf_txbatch *tx = calloc(1, sizeof(gf_txbatch));
    uint8_t (*rxbuf)[GF_MAXFRAME] = malloc((size_t)GF_BATCH * GF_MAXFRAME);
    struct mmsghdr msgs[GF_BATCH]; struct iovec iov[GF_BATCH];
    struct pollfd fds[GF_PORTS + 1]; int fdport[GF_PORTS + 1], nfds = 0;
    for (int p = 0; p < GF_PORTS; p++) if (sw->ports[p].fd >= 0) { fds[nfds].fd = sw->ports[p].fd; fds[nfds].events = POLLIN; fdport[nfds++] = p; }
    fds[nfds].fd = sw->wake[0]; fds[nfds].events = POLLIN; fdport[nfds++] = -1;
    c->p = sw->p; r->p = sw->p; c->rng = 0x9E3779B97F4A7C15ULL ^ (uint64_t)gf_now_us();
    while (!__atomic_load_n(&sw->stop, __ATOMIC_RELAXED)) {
        if (poll(fds, nfds, 200) <= 0) continue;
        for (int k = 0; k < nfds; k++) {
            if (fdport[k] < 0 || !(fds[k].revents & POLLIN)) continue;
            for (int i = 0; i < GF_BATCH; i++) {
                iov[i].iov_base = rxbuf[i]; iov[i].iov_len = GF_MAXFRAME;
                memset(&msgs[i], 0, sizeof(msgs[i]));
                msgs[i].msg_hdr.msg_iov = &iov[i]; msgs[i].msg_hdr.msg_iovlen = 1;
            }
            /* MSG_TRUNC: msg_len is the frame's real length, so a frame larger than the buffer
             * is seen as such (counted oversize and dropped), never processed cut */
            int n = recvmmsg(fds[k].fd, msgs, GF_BATCH, MSG_DONTWAIT | MSG_TRUNC, 0);
            if (n <= 0) continue;
            pthread_rwlock_rdlock(&sw->p->lock);
            for (int i = 0; i < n; i++) {
                uint32_t len = (msgs[i].msg_hdr.msg_flags & MSG_TRUNC) ? GF_MAXFRAME + 1 : msgs[i].msg_len;
                gf_receive(sw, c, r, rxbuf[i], len, (uint32_t)fdport[k], tx);
            }
            pthread_rwlock_unlock(&sw->p->lock);
            gf_flush(sw, tx);
        }
    }
    free(c); free(r); free(tx); free(rxbuf);
    return 0;
}

static void *gf_egress_loop(void *arg) {
    gf_switch *sw = arg;
    gf_ctx *c = calloc(1, sizeof(gf_ctx));
    gf_txbatch *tx = calloc(1, sizeof(gf_txbatch));
    c->p = sw->p; c->rng = 0xD1B54A32D192ED03ULL ^ (uint64_t)gf_now_us();
    pthread_mutex_lock(&sw->tm);
    while (!sw->stop) {
        double now = gf_now_us(), best = 0; int bport = -1, bprio = -1;
        for (int p = 0; p < GF_PORTS; p++) {
            gf_port *pt = &sw->ports[p];
            if (!pt->queued) continue;
            for (int q = sw->nprio - 1; q >= 0; q--) {
                gf_item *h = pt->q[q].head;
                if (!h) continue;
                double t = h->send_us > pt->free_at ? h->send_us : pt->free_at;
                if (bport < 0 || t < best) { best = t; bport = p; bprio = q; }
            }
        }
        if (bport < 0 || best > now) {
            struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts);
            double wait = bport < 0 ? 100000.0 : best - now;
            if (wait > 100000.0) wait = 100000.0;
            long ns = ts.tv_nsec + (long)(wait * 1000.0);
            ts.tv_sec += ns / 1000000000L; ts.tv_nsec = ns % 1000000000L;
            if (tx->n) { pthread_mutex_unlock(&sw->tm); gf_flush(sw, tx); pthread_mutex_lock(&sw->tm); continue; }
            pthread_cond_timedwait(&sw->tm_cond, &sw->tm, &ts);
            continue;
        }
        gf_port *pt = &sw->ports[bport];
        gf_queue *q = &pt->q[bprio];
        gf_item *it = q->head;
        q->head = it->next; if (!q->head) q->tail = 0;
        q->n--; pt->queued--;
        if (pt->rate > 0) pt->free_at = best + gf_service_us(pt->rate, pt->per_bit, it->size);
        uint64_t tick = (uint64_t)best, deq_qdepth = q->n;
        pthread_mutex_unlock(&sw->tm);
        memcpy(c->s, it->s, sizeof it->s);
        c->data = it->data; c->len = it->len; c->payload_off = it->payload_off; c->now_us = it->enq_ts;
        pthread_rwlock_rdlock(&sw->p->lock);
        gf_depart(sw, c, (uint32_t)bport, it->enq_ts, it->enq_qdepth, tick > it->enq_ts ? tick - it->enq_ts : 0,
                  deq_qdepth, tx, 0);
        pthread_rwlock_unlock(&sw->p->lock);
        if (tx->n == GF_BATCH || !pt->queued) gf_flush(sw, tx);
        free(it);
        pthread_mutex_lock(&sw->tm);
    }
    pthread_mutex_unlock(&sw->tm);
    gf_flush(sw, tx);
    free(c); free(tx);
    return 0;
}

/* A switch over the given AF_PACKET sockets (fds[i] serves port numbers[i]). */
GF_EXPORT gf_switch *gf_sw_create(gf_prog *p, const int *fds, const uint32_t *numbers, int n, int nprio,
                                  int cpu_port, uint32_t depth) {
    gf_switch *sw = calloc(1, sizeof(gf_switch));
    sw->p = p; sw->nprio = nprio < 1 ? 1 : (nprio > GF_PRIOS ? GF_PRIOS : nprio); sw->cpu_port = cpu_port;
    for (int i = 0; i < GF_PORTS; i++) {
        sw->ports[i].fd = -1;
        for (int q = 0; q < GF_PRIOS; q++) { sw->ports[i].q[q].depth = depth; sw->ports[i].q[q].last_send = -1e300; }
    }
    for (int i = 0; i < n; i++) if (numbers[i] < GF_PORTS) sw->ports[numbers[i]].fd = fds[i];
    pthread_mutex_init(&sw->tm, 0); pthread_cond_init(&sw->tm_cond, 0);
    pthread_mutex_init(&sw->cpu_lock, 0); pthread_cond_init(&sw->cpu_cond, 0);
    if (pipe(sw->wake) != 0) { free(sw); return 0; }
    return sw;
}

GF_EXPORT int gf_sw_start(gf_switch *sw) {
    if (pthread_create(&sw->ingress, 0, gf_ingress_loop, sw)) return -1;
    if (pthread_create(&sw->egress, 0, gf_egress_loop, sw)) return -1;
    return 0;
}

static void gf_sw_counts(gf_switch *sw, uint32_t port, uint64_t *out);

/* Ask the threads to stop and wake every waiter (gf_sw_packet_in returns at once from now
 * on); the caller lets its own waiters leave before gf_sw_stop frees the switch. */
GF_EXPORT void gf_sw_halt(gf_switch *sw) {
    __atomic_store_n(&sw->stop, 1, __ATOMIC_RELAXED);
    if (write(sw->wake[1], "x", 1) < 0) {}
    pthread_mutex_lock(&sw->tm); pthread_cond_broadcast(&sw->tm_cond); pthread_mutex_unlock(&sw->tm);
    pthread_mutex_lock(&sw->cpu_lock); pthread_cond_broadcast(&sw->cpu_cond); pthread_mutex_unlock(&sw->cpu_lock);
}

/* Stop the threads, free what is queued and the switch (the sockets stay open); no other
 * thread may be inside a gf_sw_* call (gf_sw_halt first). When `final`
 * is given, the last counts go there first: the stats, then the queue drops of every port and
 * priority (ST_NSTATS + GF_PORTS * GF_PRIOS words). */
GF_EXPORT void gf_sw_stop(gf_switch *sw, uint64_t *final) {
    gf_sw_halt(sw);
    pthread_join(sw->ingress, 0); pthread_join(sw->egress, 0);
    if (final) {
        gf_sw_counts(sw, GF_PORTS, final);
        memcpy(final + ST_NSTATS, sw->qdrops, sizeof sw->qdrops);
    }
    for (int p = 0; p < GF_PORTS; p++) for (int q = 0; q < GF_PRIOS; q++) {
        gf_item *it = sw->ports[p].q[q].head;
        while (it) { gf_item *nx = it->next; free(it); it = nx; }
    }
    for (uint32_t i = sw->cpu_head; i != sw->cpu_tail; i++) free(sw->cpu_frames[i % GF_CPU_RING]);
    close(sw->wake[0]); close(sw->wake[1]);
    free(sw);
}

/* Queue settings: prio < 0 means every priority queue; rate 0 = unlimited; depth 0 = keep. */
GF_EXPORT void gf_sw_set_queue(gf_switch *sw, uint32_t port, int prio, double rate, int per_bit, uint32_t depth) {
    if (port >= GF_PORTS) return;
    pthread_mutex_lock(&sw->tm);
    for (int q = 0; q < GF_PRIOS; q++) if (prio < 0 || q == prio) {
        if (rate >= 0) { sw->ports[port].q[q].rate = rate; sw->ports[port].q[q].per_bit = per_bit; }
        if (depth) sw->ports[port].q[q].depth = depth;
    }
    pthread_mutex_unlock(&sw->tm);
}

GF_EXPORT void gf_sw_set_port_rate(gf_switch *sw, uint32_t port, double rate, int per_bit) {
    if (port >= GF_PORTS) return;
    pthread_mutex_lock(&sw->tm);
    sw->ports[port].rate = rate; sw->ports[port].per_bit = per_bit;
    pthread_mutex_unlock(&sw->tm);
}

/* Counts: rx, tx, queue_full, bad_priority, to_cpu, no_such_port, cpu_drop, digests, failed
 * (packets an extern without a body or an assertion failed), oversize (frames larger than
 * GF_MAXFRAME, dropped whole), send errors (frames the port refused, e.g. over its MTU);
 * then the queue drops of `port` per priority. */
static void gf_sw_counts(gf_switch *sw, uint32_t port, uint64_t *out) {
    for (int i = 0; i < ST_NSTATS; i++) out[i] = __atomic_load_n(&sw->stats[i], __ATOMIC_RELAXED);
    for (int q = 0; q < GF_PRIOS; q++) out[ST_NSTATS + q] = port < GF_PORTS ? sw->qdrops[port][q] : 0;
}

GF_EXPORT void gf_sw_stats(gf_switch *sw, uint32_t port, uint64_t *out) { gf_sw_counts(sw, port, out); }

GF_EXPORT uint32_t gf_sw_queued(gf_switch *sw, uint32_t port, int prio) {
    if (port >= GF_PORTS) return 0;
    pthread_mutex_lock(&sw->tm);
    uint32_t n = prio < 0 ? sw->ports[port].queued : sw->ports[port].q[prio % GF_PRIOS].n;
    pthread_mutex_unlock(&sw->tm);
    return n;
}

/* A frame the pipeline sent to the CPU port or a packet's digest words (*kind 0 or 1),
 * waiting up to timeout_ms; its length in bytes, or -1. */
GF_EXPORT int gf_sw_packet_in(gf_switch *sw, uint8_t *buf, uint32_t cap, int timeout_ms, int *kind) {
    pthread_mutex_lock(&sw->cpu_lock);
    if (sw->cpu_head == sw->cpu_tail && !sw->stop) {
        struct timespec ts; clock_gettime(CLOCK_REALTIME, &ts);
        long ns = ts.tv_nsec + (long)timeout_ms * 1000000L;
        ts.tv_sec += ns / 1000000000L; ts.tv_nsec = ns % 1000000000L;
        pthread_cond_timedwait(&sw->cpu_cond, &sw->cpu_lock, &ts);
    }
    int len = -1;
    if (sw->cpu_head != sw->cpu_tail) {
        uint32_t i = sw->cpu_head % GF_CPU_RING;
        len = (int)(sw->cpu_lens[i] < cap ? sw->cpu_lens[i] : cap);
        memcpy(buf, sw->cpu_frames[i], (size_t)len);
        *kind = sw->cpu_kinds[i];
        free(sw->cpu_frames[i]); sw->cpu_head++;
    }
    pthread_mutex_unlock(&sw->cpu_lock);
    return len;
}

/* A frame handed in from outside the ingress thread: it enters ingress on `port`. */
GF_EXPORT void gf_sw_receive(gf_switch *sw, const uint8_t *frame, uint32_t len, uint32_t port) {
    gf_ctx *c = calloc(1, sizeof(gf_ctx)), *r = calloc(1, sizeof(gf_ctx));
    gf_txbatch *tx = calloc(1, sizeof(gf_txbatch));
    c->p = sw->p; r->p = sw->p; c->rng = (uint64_t)gf_now_us() | 1;
    pthread_rwlock_rdlock(&sw->p->lock);
    gf_receive(sw, c, r, frame, len, port, tx);
    pthread_rwlock_unlock(&sw->p->lock);
    gf_flush(sw, tx);
    free(c); free(r); free(tx);
}

/* A PacketOut: the frame enters ingress on the CPU port. */
GF_EXPORT void gf_sw_packet_out(gf_switch *sw, const uint8_t *frame, uint32_t len) {
    gf_sw_receive(sw, frame, len, (uint32_t)sw->cpu_port);
}

#endif
