/* Probes answered in C: compiled after hosts/fastpath.c as one unit (hosts/fastpath.py joins
 * the two sources), whose HDR, BATCH and be32 it uses.
 *
 * Python registers each open message whose packet map C may read (its
 * header's job, worker, tensor and iteration, its kind, source, length, `seqs` map and mark, the
 * elements arrived and the missing ones its bound allows) and forgets it when the message
 * completes or is given up; gfh_recv marks a batch's probes of registered messages (bad[q] =
 * ANSWERED) and gfh_answer, called once the batch's data is placed, answers them as
 * hosts/receiver.py's _probe and _bitmaps would: one bitmap of the packets asked about, the
 * probe's nonce back, flagged ECN_ECHO when the message owes an echo (CE-marked data since its
 * last answer: the echo is then sent and no longer owed) and LAST when the probe is flagged
 * *last* and the message is within its bound: it completes here (bad[q] = ANSWERED_LAST, its slot
 * listed in `done`, where Python completes it; its further probes of the batch are left). A probe
 * whose message is no longer registered, whose sender's address is no longer the member's
 * (`left`, set by Python), or that disagrees with it (width, bounds, length) is left to Python
 * (bad[q] = LEFT), which answers or drops it as any other. Never with a job key (answers are
 * signed in Python). */
#define ANSWER_SLOTS 256
#define DONE_SLOTS 128 /* messages completed with every element, the latest ones */
#define ANSWERED 2
#define LEFT 3
#define ANSWERED_LAST 4
#define PLACED 5
#define F_LAST 0x02     /* hosts/wire.py Flags */
#define F_ECN_ECHO 0x08
#define BITMAP_BITS 8192 /* BITMAP_BITS_PER_PACKET, hosts/wire.py */

struct gfh_entry {
    uint8_t *values, *have; /* the open message's arrays (gfh_absorb places its runs there) */
    uint8_t *seqs;
    uint32_t src_ip, tensor_len;
    uint32_t received, allowed; /* elements arrived (Python keeps it current); missing ones the bound allows */
    uint16_t src_port;
    uint8_t key[10]; /* header bytes 2..11: job, worker, tensor, iteration */
    uint8_t kind, echo, used, left; /* used: 1 open, 2 completed by gfh_answer (until Python forgets it) */
    int mark;
    int mode; /* gfh_place's mode for its runs (0 place, 2 add, 3 place and read ahead) */
};

struct gfh_answers {
    int top;                    /* entries [0, top) may be in use */
    int marked;                 /* probes gfh_mark marked in the last batch */
    int answered, left, failed; /* of the last gfh_answer */
    int echoed;                 /* its answers that carried an ECN echo */
    int ndone;                  /* messages it completed: their slots in done[0, ndone) */
    int done[ANSWER_SLOTS];
    struct gfh_entry e[ANSWER_SLOTS];
    int dnext;                  /* the done entry gfh_done fills next (a ring) */
    struct gfh_entry d[DONE_SLOTS];
    /* Of the last gfh_absorb: packets placed (flagged PLACED), the entries it placed runs of
     * (touched, possibly repeated) and completed (full), the hint's entry (-1: none), and counts
     * as hosts/receiver.py's handle_run keeps them. */
    int nplaced, ntouched, nfull, hinted;
    int touched[ANSWER_SLOTS], full[ANSWER_SLOTS];
    int64_t data, dup, oob, payload, late, ce;
};

/* Entry e in use (1) for probe b's message from ip:port. */
static int matches(const struct gfh_entry *e, const uint8_t *b, uint32_t ip, uint16_t port) {
    return e->used == 1 && e->src_ip == ip && e->src_port == port && e->kind == b[22] && memcmp(e->key, b + 2, 10) == 0;
}

static int entry_of(const struct gfh_answers *a, const uint8_t *b, uint32_t ip, uint16_t port) {
    for (int k = 0; k < a->top; k++)
        if (matches(&a->e[k], b, ip, port)) return k;
    return -1;
}

/* The done entry of probe b's message (-1: none): a message that completed with every element,
 * whose probes are answered flagged LAST with every bit set, as Python answers them. */
static int done_of(const struct gfh_answers *a, const uint8_t *b, uint32_t ip, uint16_t port) {
    for (int k = 0; k < DONE_SLOTS; k++)
        if (matches(&a->d[k], b, ip, port)) return k;
    return -1;
}

/* The message of data packet i (its header and source) completed with all tensor_len elements:
 * its later probes are answered here (until its done entry is reused, DONE_SLOTS messages later,
 * or Python forgets it). Returns the entry's slot. */
int gfh_done(struct gfh_answers *a, const uint8_t *buf, const uint32_t *off, const uint32_t *src_ip,
             const uint16_t *src_port, int i, uint32_t tensor_len) {
    int k = a->dnext;
    a->dnext = (k + 1) % DONE_SLOTS;
    struct gfh_entry *e = &a->d[k];
    const uint8_t *b = buf + off[i];
    e->seqs = NULL;
    e->src_ip = src_ip[i];
    e->src_port = src_port[i];
    e->tensor_len = e->received = tensor_len;
    e->allowed = 0;
    memcpy(e->key, b + 2, 10);
    e->kind = b[0] & 0x0F;
    e->echo = e->left = 0;
    e->mark = 0;
    e->used = 1;
    return k;
}

/* No probe of a batch marked yet. */
void gfh_unmark(struct gfh_answers *a) { a->marked = 0; }

/* Whether data of probe q's message from its source come shortly before it in the batch (within
 * LOOK_BACK packets, so a batch of many probes costs no quadratic search): Python may register
 * the message while placing them (gfh_answer then finds it, or leaves the probe). */
#define LOOK_BACK 64
static int data_before(const uint8_t *buf, const uint32_t *off, const uint32_t *len, const uint32_t *src_ip,
                       const uint16_t *src_port, const uint8_t *bad, int q) {
    const uint8_t *b = buf + off[q];
    for (int o = q - 1; o >= 0 && o >= q - LOOK_BACK; o--) {
        const uint8_t *d = buf + off[o];
        if (!bad[o] && len[o] >= HDR && d[0] == ((1 << 4) | b[22]) && src_ip[o] == src_ip[q] &&
            src_port[o] == src_port[q] && memcmp(d + 2, b + 2, 10) == 0)
            return 1;
    }
    return 0;
}

/* Whether data after probe q in the batch [q+1, n) change what its answer would be at its place:
 * for a probe flagged *last*, any data of its message (from any source); for another, CE-marked
 * data of its message (`until`: the last CE-marked packet of the batch). gfh_answer answers once the
 * whole batch is placed; it answers only probes without such data, so each answer's echo and
 * whether it completes the message are those Python gives at the probe's place, and data after a
 * completing probe still count as they would there (late). */
static int data_after(const uint8_t *buf, const uint32_t *off, const uint32_t *len, const uint8_t *tos,
                      const uint8_t *bad, int q, int n, int until) {
    const uint8_t *b = buf + off[q];
    int any = (b[1] & F_LAST) != 0;
    int end = any ? n : until + 1;
    for (int o = q + 1; o < end; o++) {
        const uint8_t *d = buf + off[o];
        if ((any || (tos[o] & 3) == 3) && !bad[o] && len[o] >= HDR && d[0] == ((1 << 4) | b[22]) &&
            memcmp(d + 2, b + 2, 10) == 0)
            return 1;
    }
    return 0;
}

/* A probe (version 1, no reserved flags) about a message (tensor_len > 0) that is registered (open
 * or done) or has data before it in the batch, and no data after it that would change its answer
 * (data_after). Marks bad[q] = ANSWERED; returns how many. */
int gfh_mark(struct gfh_answers *a, const uint8_t *buf, const uint32_t *off, const uint32_t *len,
             const uint32_t *src_ip, const uint16_t *src_port, const uint8_t *tos, uint8_t *bad, int n) {
    int marked = 0, until = -1;
    for (int o = n - 1; o >= 0; o--)
        if ((tos[o] & 3) == 3) {
            until = o;
            break;
        }
    for (int q = 0; q < n; q++) {
        const uint8_t *b = buf + off[q];
        if (bad[q] || len[q] < HDR || b[0] != ((1 << 4) | 2) || (b[1] & 0xF0) || b[22] > 1 || be32(b + 16) == 0)
            continue;
        if ((data_before(buf, off, len, src_ip, src_port, bad, q) || entry_of(a, b, src_ip[q], src_port[q]) >= 0 ||
             done_of(a, b, src_ip[q], src_port[q]) >= 0) &&
            !data_after(buf, off, len, tos, bad, q, n, until)) {
            bad[q] = ANSWERED;
            marked++;
        }
    }
    a->marked = marked;
    return marked;
}

static int send_answers(int fd, struct mmsghdr *msgs, int m) {
    int failed = 0, sent = 0;
    while (sent < m) {
        int r = sendmmsg(fd, msgs + sent, (unsigned)(m - sent), 0);
        if (r < 0) {
            if (errno == EINTR) continue;
            failed++; /* this one refused: go on with the rest, as Python's one sendto each would */
            sent++;
            continue;
        }
        sent += r;
    }
    return failed;
}

/* Answer the probes marked ANSWERED among packets [0, n) (see above). Sets a->answered (of them
 * those completing their message now marked ANSWERED_LAST, listed in a->done), a->echoed, a->left
 * (now marked LEFT) and a->failed (answers the socket refused); returns a->left. */
int gfh_answer(int fd, const uint8_t *buf, const uint32_t *off, const uint32_t *len, const uint32_t *src_ip,
               const uint16_t *src_port, uint8_t *bad, int n, struct gfh_answers *a) {
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH];
    struct sockaddr_in to[BATCH];
    static __thread uint8_t out[BATCH][HDR + BITMAP_BITS / 8];
    int m = 0;
    a->answered = a->left = a->failed = a->echoed = a->ndone = 0;
    for (int q = 0; q < n; q++) {
        if (bad[q] != ANSWERED) continue;
        const uint8_t *b = buf + off[q];
        int k = entry_of(a, b, src_ip[q], src_port[q]);
        struct gfh_entry *e = k >= 0 ? &a->e[k] : NULL;
        if (!e && (k = done_of(a, b, src_ip[q], src_port[q])) >= 0) e = &a->d[k];
        uint32_t first = be32(b + 12), tl = be32(b + 16), nb = be32(b + 24);
        int64_t cap = 8 * (3 * (int64_t)len[q] - HDR);
        if (cap > BITMAP_BITS) cap = BITMAP_BITS;
        if (!e || e->left || tl != e->tensor_len || nb == 0 || (int64_t)nb > cap || (uint64_t)first + nb > tl) {
            bad[q] = LEFT;
            a->left++;
            continue;
        }
        uint8_t *o = out[m];
        o[0] = (1 << 4) | 3; /* bitmap */
        o[1] = 0;
        if (!e->seqs) { /* completed with every element: it needs nothing more */
            o[1] |= F_LAST;
            bad[q] = ANSWERED_LAST;
        } else if ((b[1] & F_LAST) && e->tensor_len - e->received <= e->allowed) { /* completes it (_probe) */
            o[1] |= F_LAST;
            e->used = 2;
            a->done[a->ndone++] = k;
            bad[q] = ANSWERED_LAST;
        }
        if (e->echo) {
            o[1] |= F_ECN_ECHO;
            e->echo = 0;
            a->echoed++;
        }
        memcpy(o + 2, b + 2, 18); /* job, worker, tensor, iteration, offset (first), tensor_len */
        o[20] = (uint8_t)(nb >> 8);
        o[21] = (uint8_t)nb;
        o[22] = b[22]; /* kind */
        o[23] = 7;
        o[24] = o[25] = 0;
        o[26] = b[20]; /* the probe's nonce */
        o[27] = b[21];
        uint32_t bytes = (nb + 7) / 8;
        if (!e->seqs) {
            memset(o + HDR, 0xFF, nb / 8);
            if (nb % 8) o[HDR + nb / 8] = (uint8_t)((1u << (nb % 8)) - 1);
        } else {
            memset(o + HDR, 0, bytes);
            const uint8_t *s = e->seqs + first, mk = (uint8_t)e->mark;
            for (uint32_t i = 0; i < nb; i++)
                if (s[i] == mk) o[HDR + i / 8] |= (uint8_t)(1u << (i & 7));
        }
        memset(&to[m], 0, sizeof to[m]);
        to[m].sin_family = AF_INET;
        to[m].sin_addr.s_addr = src_ip[q];
        to[m].sin_port = src_port[q];
        iov[m].iov_base = o;
        iov[m].iov_len = HDR + bytes;
        memset(&msgs[m], 0, sizeof msgs[m]);
        msgs[m].msg_hdr.msg_name = &to[m];
        msgs[m].msg_hdr.msg_namelen = sizeof to[m];
        msgs[m].msg_hdr.msg_iov = &iov[m];
        msgs[m].msg_hdr.msg_iovlen = 1;
        a->answered++;
        if (++m == BATCH) {
            a->failed += send_answers(fd, msgs, m);
            m = 0;
        }
    }
    if (m) a->failed += send_answers(fd, msgs, m);
    return a->left;
}

/* gfh_done for the message of open entry k (completed with every element). */
int gfh_done_entry(struct gfh_answers *a, int k) {
    int d = a->dnext;
    a->dnext = (d + 1) % DONE_SLOTS;
    struct gfh_entry *e = &a->d[d];
    *e = a->e[k];
    e->values = e->have = e->seqs = NULL;
    e->received = e->tensor_len;
    e->allowed = 0;
    e->echo = e->left = 0;
    e->used = 1;
    return d;
}

/* A probe of the message of data packet b (any source) among packets [0, i) that gfh_mark left
 * to Python (handled in order there: the message's later data must wait for it). */
static int probe_left_before(const uint8_t *buf, const uint32_t *off, const uint32_t *len, const uint8_t *bad,
                             const uint8_t *b, int i) {
    for (int o = 0; o < i; o++) {
        const uint8_t *p = buf + off[o];
        if (bad[o] != ANSWERED && len[o] >= HDR && p[0] == ((1 << 4) | 2) && p[22] == (b[0] & 0x0F) &&
            memcmp(p + 2, b + 2, 10) == 0)
            return 1;
    }
    return 0;
}

/* Place the runs (gfh_runs) of data of registered open messages in packets [0, n), from their
 * sources, of their length, none after a probe of theirs left to Python, as hosts/receiver.py's
 * handle_run would (gfh_place in the entry's mode, CE marks owing an echo, packets after the one
 * completing a message counted late); flag their packets PLACED. Python then takes the counts,
 * each touched message's elements received and the completed ones (hosts/fastpath.py). Returns
 * the packets placed. */
int gfh_absorb(struct gfh_answers *a, const uint8_t *buf, const uint32_t *off, const uint32_t *len,
               const uint32_t *src_ip, const uint16_t *src_port, const uint8_t *tos, uint8_t *bad,
               const uint64_t *pay, int n, struct gfh_hint *hint) {
    a->nplaced = a->ntouched = a->nfull = 0;
    a->hinted = -1;
    a->data = a->dup = a->oob = a->payload = a->late = a->ce = 0;
    int64_t res[R_SLOTS];
    for (int i = 0; i < n && a->top && a->ntouched < ANSWER_SLOTS;) {
        int j = gfh_runs(buf, off, len, src_ip, src_port, i, n);
        const uint8_t *b = buf + off[i];
        if (bad[i] || len[i] < HDR || (b[0] >> 4) != 1 || (b[0] & 0x0F) > 1 || (b[1] & 0xF0)) {
            i = j;
            continue;
        }
        int k = -1;
        for (int c = 0; c < a->top && k < 0; c++) {
            const struct gfh_entry *e = &a->e[c];
            if (e->used == 1 && !e->left && e->values && e->src_ip == src_ip[i] && e->src_port == src_port[i] &&
                e->kind == (b[0] & 0x0F) && e->tensor_len == be32(b + 16) && memcmp(e->key, b + 2, 10) == 0)
                k = c;
        }
        if (k < 0 || probe_left_before(buf, off, len, bad, b, i)) {
            i = j;
            continue;
        }
        struct gfh_entry *e = &a->e[k];
        for (int o = i; o < j; o++)
            if ((tos[o] & 3) == 3) {
                a->ce++;
                e->echo = 1;
            }
        gfh_place(buf, off, len, i, j, e->tensor_len, e->values, e->have, e->seqs, e->received, e->mode, res,
                  e->mark, pay, src_ip, src_port, hint);
        a->data += res[R_DATA];
        a->dup += res[R_DUP];
        a->oob += res[R_OOB];
        a->payload += res[R_PAYLOAD];
        e->received += (uint32_t)res[R_RECEIVED];
        if (a->ntouched == 0 || a->touched[a->ntouched - 1] != k) a->touched[a->ntouched++] = k;
        if (e->mode == 3 && hint && hint->values == e->values) a->hinted = k;
        if (e->received == e->tensor_len) { /* complete: the rest of the run comes late */
            e->used = 2;
            a->full[a->nfull++] = k;
            if (res[R_USED] < j) {
                gfh_place(buf, off, len, (int)res[R_USED], j, e->tensor_len, NULL, NULL, NULL, 0, 1, res, 0, pay,
                          src_ip, src_port, NULL);
                a->oob += res[R_OOB];
                a->payload += res[R_PAYLOAD];
                a->late += res[R_OTHER];
            }
        }
        for (int o = i; o < j; o++) bad[o] = PLACED;
        a->nplaced += j - i;
        i = j;
    }
    return a->nplaced;
}
