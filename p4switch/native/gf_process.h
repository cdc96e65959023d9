/* One packet through ingress and egress with empty queues (what STF tests and the
 * comparison with the Python pipeline use); clones and multicast replicas included, in the
 * Python pipeline's order: I2E clones, then the packet or its replicas; of each egress, its
 * E2E clones before the frame itself. */
#ifndef GF_PROCESS_H
#define GF_PROCESS_H

#define GF_MAX_CLONE_DEPTH 16  /* E2E clones of clones, as the Python pipeline's _MAX_LOOPS */

/* Where gf_process collects frames and digest words. */
typedef struct {
    uint8_t *buf; uint32_t cap, used;
    uint32_t *ports, *lens; int max, n;
    uint64_t *words; uint32_t *nwords;
} gf_sink;

static void gf_sink_words(gf_sink *k, const gf_ctx *c) {
    if (c->ndig && *k->nwords + c->ndig <= GF_DIGEST_WORDS) {
        memcpy(k->words + *k->nwords, c->dig, c->ndig * sizeof(uint64_t));
        *k->nwords += c->ndig;
    }
}

/* Set up clone `t` of packet `from`: parsed anew from `data` (fresh metadata), the field list
 * `from` keeps, instance type `itype`, its session replica's rid and the session's truncation. */
static void gf_clone_setup(gf_ctx *t, const gf_ctx *from, const uint8_t *data, uint32_t len, uint32_t in_port,
                           uint32_t itype, uint32_t rid, uint32_t truncate) {
    t->p = from->p; t->rng = from->rng;
    gf_clone_parse(t, data, len, in_port, from->now_us);
    gf_preserve(t, from, from->s[GF_CLONE_FL]);
    t->s[GF_STD_INSTANCE_TYPE] = itype; t->s[GF_STD_EGRESS_RID] = rid; t->s[GF_TRUNCATE] = truncate;
}

static int gf_ingress_out(gf_prog *p, gf_ctx *c, const uint8_t *data, uint32_t len, uint32_t port, uint64_t now,
                          gf_sink *k, int idepth, int edepth);

/* Egress of `r` on `eport` (enqueued at `enq_ts`: the packet's time, 0 for an E2E clone, as
 * on the Python pipeline), its E2E clones first, then its frame; the fault, or 0. */
static int gf_emit(gf_prog *p, gf_ctx *r, uint32_t eport, uint64_t enq_ts, gf_sink *k, int depth) {
    uint8_t *frame = malloc(GF_MAXFRAME);
    int flen = gf_egress_run(r, eport, enq_ts, 0, 0, 0, frame), fault = r->fault;
    gf_sink_words(k, r);
    if (!fault && r->s[GF_CLONE] == 2 && depth < GF_MAX_CLONE_DEPTH) {
        gf_mgroup *sess = gf_session(p, r->s[GF_CLONE_SESSION]);
        gf_ctx *t = malloc(sizeof(gf_ctx));
        for (uint32_t i = 0; sess && i < sess->n && !fault; i++) {
            gf_clone_setup(t, r, frame, r->full_len, (uint32_t)r->s[GF_STD_INGRESS_PORT], 2, sess->rids[i],
                           sess->truncate);
            gf_sink_words(k, t);
            fault = t->fault ? t->fault : gf_emit(p, t, sess->ports[i], 0, k, depth + 1);
        }
        free(t);
    }
    if (!fault && flen >= 0 && r->s[GF_RECIRC]) {
        /* recirculated: the deparsed frame goes through ingress again in place of leaving
         * (the fields of its field list kept), instance type 4 */
        if (depth < GF_MAX_CLONE_DEPTH) {
            gf_ctx *t = malloc(sizeof(gf_ctx));
            t->p = p; t->rng = r->rng;
            uint32_t in_port = (uint32_t)r->s[GF_STD_INGRESS_PORT];
            gf_ingress_again(t, r, frame, (uint32_t)flen, in_port, r->now_us, r->s[GF_RECIRC] - 1, 4);
            gf_sink_words(k, t);
            fault = t->fault ? t->fault : gf_ingress_out(p, t, frame, (uint32_t)flen, in_port, t->now_us, k, depth + 1,
                                                                 depth + 1);
            free(t);
        }
    } else if (!fault && flen >= 0 && k->n < k->max && k->used + (uint32_t)flen <= k->cap) {
        memcpy(k->buf + k->used, frame, flen);
        k->used += flen; k->ports[k->n] = eport; k->lens[k->n] = flen; k->n++;
    }
    free(frame);
    return fault;
}

/* Frames out: concatenated in `outbuf`, their ports and lengths in out_ports/out_lens;
 * returns how many (at most maxout), or -1 - fault when the packet failed (no frames).
 * The digest and log words of ingress, then of each egress, go to `digests` ([id, n,
 * values...] each, at most GF_DIGEST_WORDS words), their word count to *ndigest. */
GF_EXPORT int gf_process(gf_prog *p, const uint8_t *data, uint32_t len, uint32_t port, uint64_t now,
                         uint64_t seed, uint8_t *outbuf, uint32_t outcap, uint32_t *out_ports,
                         uint32_t *out_lens, int maxout, uint64_t *digests, uint32_t *ndigest) {
    *ndigest = 0;
    if (len > GF_MAXFRAME) return -1;
    gf_sink k = {outbuf, outcap, 0, out_ports, out_lens, maxout, 0, digests, ndigest};
    gf_ctx *c = malloc(sizeof(gf_ctx));
    c->p = p; c->rng = seed ? seed : 0x9E3779B97F4A7C15ULL;
    pthread_rwlock_rdlock(&p->lock);
    gf_ingress_run(c, data, len, port, now);
    gf_sink_words(&k, c);
    int fault = c->fault ? c->fault : gf_ingress_out(p, c, data, len, port, now, &k, 0, 0);
    pthread_rwlock_unlock(&p->lock);
    free(c);
    return fault ? -1 - fault : k.n;
}

/* What leaves after the ingress of `c` (its frame `data`): I2E clones, then the resubmitted
 * packet (in place of the packet) or the packet or its multicast replicas; the fault, or 0.
 * `idepth` counts the ingress loops before it, `edepth` is the depth its egress runs at (as
 * the Python pipeline's _depth of ingress and egress). */
static int gf_ingress_out(gf_prog *p, gf_ctx *c, const uint8_t *data, uint32_t len, uint32_t port, uint64_t now,
                          gf_sink *kp, int idepth, int edepth) {
    gf_ctx *r = malloc(sizeof(gf_ctx));
    r->p = p; r->rng = c->rng;
    int fault = 0;
    if (c->s[GF_CLONE] == 1) {  /* I2E clones: the original frame, parsed anew */
        gf_mgroup *sess = gf_session(p, c->s[GF_CLONE_SESSION]);
        for (uint32_t i = 0; sess && i < sess->n && !fault; i++) {
            gf_clone_setup(r, c, data, len, port, 1, sess->rids[i], sess->truncate);
            r->s[GF_STD_EGRESS_SPEC] = sess->ports[i];
            gf_sink_words(kp, r);
            fault = r->fault ? r->fault : gf_emit(p, r, sess->ports[i], now, kp, edepth);
        }
    }
    if (!fault && c->s[GF_RESUBMIT]) {  /* resubmitted: the arriving frame through ingress again, instance type 6 */
        if (idepth < GF_MAX_CLONE_DEPTH) {
            gf_ingress_again(r, c, data, len, port, now, c->s[GF_RESUBMIT] - 1, 6);
            gf_sink_words(kp, r);
            gf_ctx *again = r;
            r = malloc(sizeof(gf_ctx));
            fault = again->fault ? again->fault : gf_ingress_out(p, again, data, len, port, now, kp, idepth + 1, edepth);
            free(again);
        }
        free(r);
        return fault;
    }
    uint64_t grp = c->s[GF_STD_MCAST_GRP];
    uint32_t nrep = 0;
    if (grp) nrep = grp < p->ngroups ? p->groups[grp].n : 0;
    else if (c->s[GF_STD_EGRESS_SPEC] != GF_DROP) nrep = 1;
    for (uint32_t i = 0; i < nrep && !fault; i++) {
        uint32_t eport;
        memcpy(r, c, sizeof(gf_ctx));
        if (grp) {
            eport = p->groups[grp].ports[i];
            r->s[GF_STD_EGRESS_RID] = p->groups[grp].rids[i];
            /* a new packet: not cut, not recirculated */
            r->s[GF_STD_INSTANCE_TYPE] = 5; r->s[GF_TRUNCATE] = 0; r->s[GF_RECIRC] = 0;
        } else eport = (uint32_t)c->s[GF_STD_EGRESS_SPEC];
        fault = gf_emit(p, r, eport, now, kp, edepth);
    }
    free(r);
    return fault;
}

#endif
