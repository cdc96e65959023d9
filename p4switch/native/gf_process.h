/* One packet through ingress and egress with empty queues (what STF tests and the
 * comparison with the Python pipeline use); multicast replicas included. */
#ifndef GF_PROCESS_H
#define GF_PROCESS_H

/* Frames out: concatenated in `outbuf`, their ports and lengths in out_ports/out_lens;
 * returns how many (at most maxout), or -1 - fault when the packet failed (no frames).
 * The digest and log words of ingress, then of each egress, go to `digests` ([id, n,
 * values...] each, at most GF_DIGEST_WORDS words), their word count to *ndigest. */
GF_EXPORT int gf_process(gf_prog *p, const uint8_t *data, uint32_t len, uint32_t port, uint64_t now,
                         uint64_t seed, uint8_t *outbuf, uint32_t outcap, uint32_t *out_ports,
                         uint32_t *out_lens, int maxout, uint64_t *digests, uint32_t *ndigest) {
    *ndigest = 0;
    if (len > GF_MAXFRAME) return -1;
    gf_ctx *c = malloc(sizeof(gf_ctx)), *r = malloc(sizeof(gf_ctx));
    uint8_t *frame = malloc(GF_MAXFRAME);
    int n = 0; uint32_t used = 0;
    c->p = p; c->rng = seed ? seed : 0x9E3779B97F4A7C15ULL;
    pthread_rwlock_rdlock(&p->lock);
    gf_ingress_run(c, data, len, port, now);
    memcpy(digests, c->dig, c->ndig * sizeof(uint64_t));
    *ndigest = c->ndig;
    int fault = c->fault;
    uint64_t grp = S[GF_STD_MCAST_GRP];
    uint32_t nrep = 0;
    if (grp) nrep = grp < p->ngroups ? p->groups[grp].n : 0;
    else if (S[GF_STD_EGRESS_SPEC] != GF_DROP) nrep = 1;
    for (uint32_t i = 0; i < nrep && n < maxout && !fault; i++) {
        uint32_t eport;
        memcpy(r, c, sizeof(gf_ctx));
        if (grp) {
            eport = p->groups[grp].ports[i];
            r->s[GF_STD_EGRESS_RID] = p->groups[grp].rids[i];
            r->s[GF_STD_INSTANCE_TYPE] = 5; r->s[GF_TRUNCATE] = 0;  /* a new packet: not cut */
        } else eport = (uint32_t)S[GF_STD_EGRESS_SPEC];
        int flen = gf_egress_run(r, eport, now, 0, 0, 0, frame);
        if (r->ndig && *ndigest + r->ndig <= GF_DIGEST_WORDS) {  /* egress's log words */
            memcpy(digests + *ndigest, r->dig, r->ndig * sizeof(uint64_t));
            *ndigest += r->ndig;
        }
        if (r->fault) { fault = r->fault; break; }
        if (flen < 0 || used + (uint32_t)flen > outcap) continue;
        memcpy(outbuf + used, frame, flen);
        used += flen; out_ports[n] = eport; out_lens[n] = flen; n++;
    }
    pthread_rwlock_unlock(&p->lock);
    free(frame); free(r); free(c);
    return fault ? -1 - fault : n;
}

#endif
