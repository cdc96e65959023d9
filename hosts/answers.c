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
#define F_LAST 0x02     /* hosts/wire.py Flags */
#define F_ECN_ECHO 0x08
#define BITMAP_BITS 8192 /* BITMAP_BITS_PER_PACKET, hosts/wire.py */

struct gfh_entry {
    const uint8_t *seqs;
    uint32_t src_ip, tensor_len;
    uint32_t received, allowed; /* elements arrived (Python keeps it current); missing ones the bound allows */
    uint16_t src_port;
    uint8_t key[10]; /* header bytes 2..11: job, worker, tensor, iteration */
    uint8_t kind, echo, used, left; /* used: 1 open, 2 completed by gfh_answer (until Python forgets it) */
    int mark;
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
};

static int entry_of(const struct gfh_answers *a, const uint8_t *b, uint32_t ip, uint16_t port) {
    for (int k = 0; k < a->top; k++) {
        const struct gfh_entry *e = &a->e[k];
        if (e->used == 1 && e->src_ip == ip && e->src_port == port && e->kind == b[22] && memcmp(e->key, b + 2, 10) == 0)
            return k;
    }
    return -1;
}

/* The done entry of probe b's message (-1: none): a message that completed with every element,
 * whose probes are answered flagged LAST with every bit set, as Python answers them. */
static int done_of(const struct gfh_answers *a, const uint8_t *b, uint32_t ip, uint16_t port) {
    for (int k = 0; k < DONE_SLOTS; k++) {
        const struct gfh_entry *e = &a->d[k];
        if (e->used == 1 && e->src_ip == ip && e->src_port == port && e->kind == b[22] && memcmp(e->key, b + 2, 10) == 0)
            return k;
    }
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
