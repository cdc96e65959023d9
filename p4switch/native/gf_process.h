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
    if (!fault && flen >= 0 && k->n < k->max && k->used + (uint32_t)flen <= k->cap) {
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
    gf_ctx *c = malloc(sizeof(gf_ctx)), *r = malloc(sizeof(gf_ctx));
    c->p = p; c->rng = seed ? seed : 0x9E3779B97F4A7C15ULL;
    pthread_rwlock_rdlock(&p->lock);
    gf_ingress_run(c, data, len, port, now);
    gf_sink_words(&k, c);
    int fault = c->fault;
    if (!fault && c->s[GF_CLONE] == 1) {  /* I2E clones: the original frame, parsed anew */
        gf_mgroup *sess = gf_session(p, c->s[GF_CLONE_SESSION]);
        for (uint32_t i = 0; sess && i < sess->n && !fault; i++) {
            gf_clone_setup(r, c, data, len, port, 1, sess->rids[i], sess->truncate);
            r->s[GF_STD_EGRESS_SPEC] = sess->ports[i];
            gf_sink_words(&k, r);
            fault = r->fault ? r->fault : gf_emit(p, r, sess->ports[i], now, &k, 0);
        }
    }
    uint64_t grp = S[GF_STD_MCAST_GRP];
    uint32_t nrep = 0;
    if (grp) nrep = grp < p->ngroups ? p->groups[grp].n : 0;
    else if (S[GF_STD_EGRESS_SPEC] != GF_DROP) nrep = 1;
    for (uint32_t i = 0; i < nrep && !fault; i++) {
        uint32_t eport;
        memcpy(r, c, sizeof(gf_ctx));
        if (grp) {
            eport = p->groups[grp].ports[i];
            r->s[GF_STD_EGRESS_RID] = p->groups[grp].rids[i];
            r->s[GF_STD_INSTANCE_TYPE] = 5; r->s[GF_TRUNCATE] = 0;  /* a new packet: not cut */
        } else eport = (uint32_t)S[GF_STD_EGRESS_SPEC];
        fault = gf_emit(p, r, eport, now, &k, 0);
    }
    pthread_rwlock_unlock(&p->lock);
    free(r); free(c);
    return fault ? -1 - fault : k.n;
}

#endif
