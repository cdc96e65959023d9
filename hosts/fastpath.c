/* The host data path's per-packet work, in batches (loaded by hosts/fastpath.py).
 *
 * gfh_send:  a message's data packets, each a 28-byte header row plus its values read in
 *            place from the tensor, with sendmmsg (two iovecs per packet, no copy in user
 *            space) and, on loopback, UDP GSO (one datagram of up to 44 packets); the
 *            magnitude classes too, when asked, just before the kernel copies the values.
 * gfh_recv:  recvmmsg of up to `slots` datagrams with their IP TOS byte and UDP GRO segment
 *            size; coalesced datagrams are split back into packets. Given a hint (the message
 *            the last run placed), a datagram's values are read straight into where that
 *            message's next packet belongs, when that place holds nothing yet.
 * gfh_runs:  where the run of data packets of one message from one source ends.
 * gfh_classes: the magnitude class of each packet's values, in one pass.
 * gfh_place: checks a run's packets (bounds, length, duplicates) and places their values
 *            into the message's arrays (or adds them to what the array holds), stopping
 *            when the message is complete.
 * gfh_mark, gfh_answer: probes of the open messages Python registered (struct gfh_answers)
 *            answered from their packet maps, every answer of a batch in one sendmmsg.
 * Protocol decisions (windows, probes, bounds, membership) stay in Python.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#ifndef SOL_UDP
#define SOL_UDP 17
#endif
#ifndef UDP_SEGMENT
#define UDP_SEGMENT 103
#endif
#ifndef UDP_GRO
#define UDP_GRO 104
#endif

#define HDR 28
#define BATCH 64
#define GSO_MAX_BYTES 65000
#define GSO_MAX_SEGS 64
#define IOV_MAX_BATCH 2048

/* Job-key tags (hosts/auth.py): HMAC-SHA256 truncated to 16 bytes, from the system's
 * libcrypto, found at run time (no headers needed to build). */
#define TAG 16
typedef const void *(*evp_md_fn)(void);
typedef unsigned char *(*hmac_fn)(const void *, const void *, int, const unsigned char *, size_t, unsigned char *,
                                  unsigned int *);
static hmac_fn hmac_sha;
static const void *sha256;

/* Callers serialise this (hosts/fastpath.py holds a lock); the release store publishes the
 * digest before the function that uses it, for threads that test hmac_sha first. */
int gfh_auth_init(const char *library) {
    if (__atomic_load_n(&hmac_sha, __ATOMIC_ACQUIRE)) return 0;
    void *h = dlopen(library, RTLD_NOW | RTLD_LOCAL);
    if (!h) return -1;
    evp_md_fn md = (evp_md_fn)dlsym(h, "EVP_sha256");
    hmac_fn f = (hmac_fn)dlsym(h, "HMAC");
    if (!md || !f) return -2;
    sha256 = md();
    __atomic_store_n(&hmac_sha, f, __ATOMIC_RELEASE);
    return 0;
}

static void tag_of(const uint8_t *key, int keylen, const uint8_t *data, size_t n, uint8_t *out) {
    unsigned char md[64];
    unsigned int len = 0;
    hmac_sha(sha256, key, keylen, data, n, md, &len);
    memcpy(out, md, TAG);
}

static uint16_t be16(const uint8_t *p) { return (uint16_t)((p[0] << 8) | p[1]); }
static uint32_t be32(const uint8_t *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* One copy for AVX2 and one for any x86-64, chosen at load time (glibc's ifunc): the
 * classes' pass over the values runs 3-8x faster with AVX2's 32-bit max. */
#if defined(__x86_64__) && defined(__GLIBC__) && (defined(__clang__) || __GNUC__ >= 6)
#define VECTOR_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define VECTOR_CLONES
#endif

/* Magnitude class of n values (n >= 1): 0 when all are 0, 255 when any is not finite, else
 * clamp(floor(log2(max |v|)) + 128, 1, 255). On the bit patterns: the exponent field is the
 * top byte of the bits shifted left once (the sign dropped), floor(log2 |v|) + 128 of a
 * normal float is that field + 1 (subnormals, field 0, clamp to 1), NaN and inf have field
 * 255, and the largest |v| has the largest field. */
VECTOR_CLONES
static uint8_t class_of(const uint8_t *values, int64_t n) {
    uint32_t top = 0, any = 0;
    for (int64_t k = 0; k < n; k++) {
        uint32_t a;
        memcpy(&a, values + (size_t)k * 4, 4);
        a <<= 1;
        any |= a;
        uint32_t e = a >> 24;
        top = e > top ? e : top;
    }
    if (!any) return 0;
    return (uint8_t)(top >= 254 ? 255 : top + 1);
}

#define HDR_MAG_CLASS 22 /* the header's mag_class byte (hosts/wire.py) */
#define CLASS_BATCH_BYTES (1 << 20) /* values read for classes per sendmmsg, so the copy finds them in cache */

/* Send packets idx[0..n) of a message: header i at hdrs + 28 i, nvals[i] values at
 * values + 4 starts[i] (count: values of a full packet). gso: packets per datagram (<= 1: no GSO).
 * classes: write each packet's magnitude class into its header first (read just before the
 * kernel copies the same values: one pass from memory instead of two). Returns packets sent or -errno. */
int gfh_send(int fd, uint32_t ip_be, uint16_t port_be, uint8_t *hdrs, const uint8_t *values,
             uint32_t count, const uint16_t *nvals, const int64_t *starts, const uint8_t *tos, const int64_t *idx,
             int n, int gso, const uint8_t *key, int keylen, int classes) {
    struct sockaddr_in dst;
    memset(&dst, 0, sizeof dst);
    dst.sin_family = AF_INET;
    dst.sin_addr.s_addr = ip_be;
    dst.sin_port = port_be;
    struct mmsghdr msgs[BATCH];
    struct iovec iov[IOV_MAX_BATCH];
    union { char buf[CMSG_SPACE(sizeof(uint16_t)) + CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } ctl[BATCH];
    static __thread uint8_t tags[IOV_MAX_BATCH / 3 + 1][TAG];
    static __thread uint8_t scratch[HDR + 4 * 65535];
    int per_iov = key ? 3 : 2;
    uint32_t full = HDR + 4 * count + (key ? TAG : 0);
    int per = gso > 1 ? gso : 1;
    if (per > GSO_MAX_SEGS) per = GSO_MAX_SEGS;
    if ((uint32_t)per * full > GSO_MAX_BYTES) per = (int)(GSO_MAX_BYTES / full);
    if (per < 1) per = 1;
    int done = 0;
    while (done < n) {
        int m = 0, k = done, v = 0, t = 0;
        size_t read = 0;
        while (m < BATCH && k < n && v + per_iov * per <= IOV_MAX_BATCH && read < CLASS_BATCH_BYTES) {
            int segs = 0;
            struct mmsghdr *mh = &msgs[m];
            memset(mh, 0, sizeof *mh);
            mh->msg_hdr.msg_name = &dst;
            mh->msg_hdr.msg_namelen = sizeof dst;
            mh->msg_hdr.msg_iov = &iov[v];
            while (k < n && segs < per) {
                int64_t i = idx[k];
                if (classes) {
                    hdrs[(size_t)i * HDR + HDR_MAG_CLASS] = class_of(values + (size_t)starts[i] * 4, nvals[i]);
                    read += (size_t)nvals[i] * 4;
                }
                iov[v].iov_base = (void *)(hdrs + (size_t)i * HDR);
                iov[v].iov_len = HDR;
                iov[v + 1].iov_base = (void *)(values + (size_t)starts[i] * 4);
                iov[v + 1].iov_len = (size_t)nvals[i] * 4;
                if (key) { /* the tag over header and values, as a third piece */
                    memcpy(scratch, iov[v].iov_base, HDR);
                    memcpy(scratch + HDR, iov[v + 1].iov_base, iov[v + 1].iov_len);
                    tag_of(key, keylen, scratch, HDR + iov[v + 1].iov_len, tags[t]);
                    iov[v + 2].iov_base = tags[t++];
                    iov[v + 2].iov_len = TAG;
                }
                v += per_iov;
                segs++;
                k++;
                if (HDR + 4u * nvals[i] + (key ? TAG : 0) != full) break; /* a short packet ends a GSO datagram */
                if (tos && k < n && tos[idx[k]] != tos[i]) break; /* one TOS byte per datagram */
            }
            mh->msg_hdr.msg_iovlen = (size_t)segs * per_iov;
            size_t used = 0;
            if (segs > 1 || tos) {
                mh->msg_hdr.msg_control = ctl[m].buf;
                mh->msg_hdr.msg_controllen = sizeof ctl[m].buf;
                struct cmsghdr *cm = CMSG_FIRSTHDR(&mh->msg_hdr);
                if (segs > 1) {
                    cm->cmsg_level = SOL_UDP;
                    cm->cmsg_type = UDP_SEGMENT;
                    cm->cmsg_len = CMSG_LEN(sizeof(uint16_t));
                    uint16_t seg = (uint16_t)full;
                    memcpy(CMSG_DATA(cm), &seg, sizeof seg);
                    used += CMSG_SPACE(sizeof(uint16_t));
                    cm = (struct cmsghdr *)((char *)cm + CMSG_SPACE(sizeof(uint16_t)));
                }
                if (tos) { /* this datagram's DSCP and ECN (marking mode "commodity") */
                    cm->cmsg_level = IPPROTO_IP;
                    cm->cmsg_type = IP_TOS;
                    cm->cmsg_len = CMSG_LEN(sizeof(int));
                    int t = tos[idx[k - 1]];
                    memcpy(CMSG_DATA(cm), &t, sizeof t);
                    used += CMSG_SPACE(sizeof(int));
                }
                mh->msg_hdr.msg_controllen = used;
            }
            m++;
        }
        int sent = 0;
        while (sent < m) {
            int r = sendmmsg(fd, msgs + sent, (unsigned)(m - sent), 0);
            if (r < 0) {
                if (errno == EINTR) continue;
                return -errno;
            }
            sent += r;
        }
        done = k;
    }
    return done;
}

/* Where the next data packets of one message are expected (set by gfh_place in mode
 * PLACE_AHEAD, cleared when the message completes there or by the caller): packets from
 * src_ip:src_port whose header agrees with `hdr` (as gfh_runs compares them), `count`
 * values each, the next one at element `next`. values/have/mark/tensor_len: the message's. */
struct gfh_hint {
    uint8_t *values;
    const uint8_t *have;
    uint8_t hdr[HDR];
    uint32_t src_ip;
    uint16_t src_port;
    uint32_t tensor_len, next, count;
    int mark;
    int peek;  /* gfh_recv asks gfh_ahead (hosts/ahead.c) first, given the answers' entries */
    int entry; /* out: the answers entry gfh_ahead pointed the hint into (-1: none) */
    uint32_t maxlen; /* out, of gfh_recv's batch: the longest packet, and the packets read in place */
    int inplace;
};

/* Same message and source as the hint's (the fields gfh_runs compares). */
static int hint_agrees(const struct gfh_hint *h, const uint8_t *b, uint32_t ip, uint16_t port) {
    return ip == h->src_ip && port == h->src_port && b[0] == h->hdr[0] && !(b[1] & 0xF0) &&
           memcmp(b + 2, h->hdr + 2, 10) == 0 && memcmp(b + 16, h->hdr + 16, 4) == 0;
}

/* Receive up to `slots` datagrams (MSG_DONTWAIT) into buf (slots x slot_size bytes) and list
 * their packets: off/len into buf, source, TOS byte. Returns packets listed (0: nothing
 * queued) or -errno. `max_pkts` must be at least slots x (slot_size / 28 + 1).
 * hint (NULL or hint->values NULL: none): datagram k of the batch is read with its header in
 * its slot and its values straight into the hinted message at element next + k x count,
 * while those elements hold nothing yet (`have`) and lie inside the message; packets larger
 * than half a slot only (one per datagram, never a GRO batch). A packet that is exactly the
 * one expected there (source, header, offset, count, length) stays there: pay[p] is the
 * address of its values; any other gets its values copied back behind its header in the
 * slot (pay[p] 0, as for every packet read whole into its slot). So a message's elements that
 * hold nothing may be written with other bytes until a packet brings them: the caller only
 * hints messages whose elements that never arrive are set at completion. A packet left in
 * place with no neighbour of its run in the list is copied back too (the caller handles
 * such a packet by itself, from the slot). */
struct gfh_answers; /* hosts/answers.c */
int gfh_mark(struct gfh_answers *a, const uint8_t *buf, const uint32_t *off, const uint32_t *len,
             const uint32_t *src_ip, const uint16_t *src_port, const uint8_t *tos, uint8_t *bad, int n);
void gfh_unmark(struct gfh_answers *a);
static int gfh_ahead(int fd, struct gfh_answers *a, struct gfh_hint *h, uint32_t slot_size, int *slots);

int gfh_recv(int fd, uint8_t *buf, int slots, uint32_t slot_size, uint32_t *off, uint32_t *len,
             uint32_t *src_ip, uint16_t *src_port, uint8_t *tos, int max_pkts, const uint8_t *key, int keylen,
             uint8_t *bad, struct gfh_hint *hint, uint64_t *pay, struct gfh_answers *answers) {
    if (slots > BATCH) slots = BATCH;
    if (answers) gfh_unmark(answers);
    if (hint) hint->entry = -1;
    /* point the hint at the next datagram's message; not after a batch of packets too small to be
     * read in place (maxlen: the last batch's longest, 0 before the first), whose peek never pays */
    if (hint && hint->peek && answers && !key && (hint->maxlen == 0 || 2 * hint->maxlen > slot_size)) {
        int q = gfh_ahead(fd, answers, hint, slot_size, &slots);
        if (q <= 0) return q;
    }
    struct mmsghdr msgs[BATCH];
    struct iovec iov[BATCH][3];
    struct sockaddr_in from[BATCH];
    union { char buf[CMSG_SPACE(sizeof(int)) * 2 + 16]; struct cmsghdr align; } ctl[BATCH];
    uint8_t *dst[BATCH]; /* where datagram i's values were asked to go (NULL: its slot) */
    uint32_t plen = 0;
    const struct gfh_hint *h = hint;
    if (h && (!h->values || key || h->count == 0 || HDR + 4 * h->count > slot_size ||
              2 * (HDR + 4 * h->count) <= slot_size))
        h = NULL;
    if (h) plen = 4 * h->count;
    memset(msgs, 0, sizeof(msgs[0]) * (size_t)slots);
    for (int i = 0; i < slots; i++) {
        uint8_t *slot = buf + (size_t)i * slot_size;
        dst[i] = NULL;
        if (h) { /* the i-th next packet's place, while it holds nothing and lies inside */
            uint64_t e = (uint64_t)h->next + (uint64_t)i * h->count;
            if (e + h->count <= h->tensor_len && memchr(h->have + e, (uint8_t)h->mark, h->count) == NULL)
                dst[i] = h->values + e * 4;
            else
                h = NULL; /* this one and the rest of the batch read whole into their slots */
        }
        if (dst[i]) {
            iov[i][0].iov_base = slot;
            iov[i][0].iov_len = HDR;
            iov[i][1].iov_base = dst[i];
            iov[i][1].iov_len = plen;
            iov[i][2].iov_base = slot + HDR + plen;
            iov[i][2].iov_len = slot_size - HDR - plen;
            msgs[i].msg_hdr.msg_iovlen = 3;
        } else {
            iov[i][0].iov_base = slot;
            iov[i][0].iov_len = slot_size;
            msgs[i].msg_hdr.msg_iovlen = 1;
        }
        msgs[i].msg_hdr.msg_iov = iov[i];
        msgs[i].msg_hdr.msg_name = &from[i];
        msgs[i].msg_hdr.msg_namelen = sizeof from[i];
        msgs[i].msg_hdr.msg_control = ctl[i].buf;
        msgs[i].msg_hdr.msg_controllen = sizeof ctl[i].buf;
    }
    int r;
    do {
        r = recvmmsg(fd, msgs, (unsigned)slots, MSG_DONTWAIT, NULL);
    } while (r < 0 && errno == EINTR);
    if (r < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
    int p = 0;
    for (int i = 0; i < r && p < max_pkts; i++) {
        uint32_t total = msgs[i].msg_len, seg = 0;
        uint8_t t = 0;
        for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msgs[i].msg_hdr); cm; cm = CMSG_NXTHDR(&msgs[i].msg_hdr, cm)) {
            if (cm->cmsg_level == IPPROTO_IP && cm->cmsg_type == IP_TOS && cm->cmsg_len >= CMSG_LEN(1)) {
                t = *(uint8_t *)CMSG_DATA(cm);
            } else if (cm->cmsg_level == SOL_UDP && cm->cmsg_type == UDP_GRO) {
                int s;
                memcpy(&s, CMSG_DATA(cm), sizeof s);
                if (s > 0) seg = (uint32_t)s;
            }
        }
        if (seg == 0 || seg >= total) seg = total;
        uint32_t base = (uint32_t)i * slot_size;
        uint64_t placed = 0; /* the address of its values when it stays where they were read */
        if (dst[i]) { /* stays there only when it is the packet expected there */
            const uint8_t *b = buf + base;
            uint64_t e = (uint64_t)(dst[i] - hint->values) / 4;
            if (seg == total && total == HDR + plen && hint_agrees(hint, b, from[i].sin_addr.s_addr, from[i].sin_port) &&
                be32(b + 12) == e && be16(b + 20) == hint->count && be32(b + 24) < hint->tensor_len)
                placed = (uint64_t)(uintptr_t)dst[i];
            else if (total > HDR)
                memcpy(buf + base + HDR, dst[i], total - HDR < plen ? total - HDR : plen);
        }
        for (uint32_t at = 0; at < total && p < max_pkts; at += seg) {
            off[p] = base + at;
            len[p] = total - at < seg ? total - at : seg;
            src_ip[p] = from[i].sin_addr.s_addr;
            src_port[p] = from[i].sin_port;
            tos[p] = t;
            bad[p] = 0;
            pay[p] = at == 0 ? placed : 0;
            if (key) { /* a job key: the packet ends in its tag, or it is dropped (len 0, bad) */
                uint8_t want[TAG];
                const uint8_t *d = buf + off[p];
                uint8_t diff = len[p] < TAG;
                if (!diff) {
                    tag_of(key, keylen, d, len[p] - TAG, want);
                    for (int b = 0; b < TAG; b++) diff |= want[b] ^ d[len[p] - TAG + b];
                }
                if (diff) {
                    bad[p] = 1;
                    len[p] = 0;
                } else {
                    len[p] -= TAG;
                }
            }
            p++;
            if (seg < HDR) break; /* not DLCP packets: one truncated datagram */
        }
    }
    /* A packet left in place needs a neighbour of its run (same source and header fields),
     * or it is copied back into its slot (the caller handles a lone packet from there). */
    for (int q = 0; q < p; q++) {
        if (!pay[q]) continue;
        const uint8_t *a = buf + off[q];
        int paired = 0;
        for (int d = -1; d <= 1 && !paired; d += 2) {
            int o = q + d;
            if (o < 0 || o >= p || len[o] < HDR) continue;
            const uint8_t *b = buf + off[o];
            paired = src_ip[o] == src_ip[q] && src_port[o] == src_port[q] && b[0] == a[0] && !(b[1] & 0xF0) &&
                     memcmp(a + 2, b + 2, 10) == 0 && memcmp(a + 16, b + 16, 4) == 0;
        }
        if (!paired) {
            memcpy(buf + off[q] + HDR, (const uint8_t *)(uintptr_t)pay[q], len[q] - HDR);
            pay[q] = 0;
        }
    }
    if (answers && !key) gfh_mark(answers, buf, off, len, src_ip, src_port, tos, bad, p);
    if (hint) {
        hint->maxlen = 0;
        hint->inplace = 0;
        for (int q = 0; q < p; q++) {
            if (len[q] > hint->maxlen) hint->maxlen = len[q];
            hint->inplace += pay[q] != 0;
        }
    }
    return p;
}

/* The end of the run starting at packet `i`: data packets (type 0/1, version 1, no reserved
 * flags) whose headers agree on type, job, worker, tensor, iteration and tensor_len, from one
 * source. Returns i + 1 when packet i itself is not such a packet. */
int gfh_runs(const uint8_t *buf, const uint32_t *off, const uint32_t *len, const uint32_t *src_ip,
             const uint16_t *src_port, int i, int n) {
    const uint8_t *a = buf + off[i];
    if (len[i] < HDR || (a[0] >> 4) != 1 || (a[0] & 0x0F) > 1 || (a[1] & 0xF0)) return i + 1;
    int j = i + 1;
    for (; j < n; j++) {
        const uint8_t *b = buf + off[j];
        if (len[j] < HDR || src_ip[j] != src_ip[i] || src_port[j] != src_port[i] || b[0] != a[0] ||
            (b[1] & 0xF0) || memcmp(a + 2, b + 2, 10) != 0 || memcmp(a + 16, b + 16, 4) != 0)
            break;
    }
    return j;
}

/* Result slots of gfh_place. */
enum { R_USED, R_DATA, R_DUP, R_OOB, R_PAYLOAD, R_RECEIVED, R_OTHER, R_SLOTS };

/* values[0..n) += src[0..n), float32 (no alignment assumed; vectorised by the compiler). */
static void add_f32(uint8_t *values, const uint8_t *src, uint32_t n) {
    for (uint32_t e = 0; e < n; e++) {
        float a, b;
        memcpy(&a, values + (size_t)e * 4, 4);
        memcpy(&b, src + (size_t)e * 4, 4);
        a += b;
        memcpy(values + (size_t)e * 4, &a, 4);
    }
}

/* Check packets i..n of a run of `tensor_len` elements and place them (values from pay[j]
 * when set, else behind the header in buf). `have` (per element)
 * and `seqs` (per packet) hold `mark` where something arrived; any other byte means nothing
 * did (so a reused map needs no zeroing: the next message takes the next mark). values/have/seqs NULL:
 * stop at the first packet that passes the packet checks (R_USED tells which) without using
 * it. mode 1: every packet passing the checks is counted in R_OTHER (late, inconsistent...).
 * Otherwise place (mode 0) or add to what `values` holds (mode 2), each element once (the
 * first packet that brings it), and stop after the packet that completes the message
 * (received == tensor_len). res[R_USED] is the index after the last packet looked at.
 * mode 3: place as mode 0, then point `hint` (when given) at the next packet of the message
 * (the caller sets the elements that never arrive at completion, so gfh_recv may read values
 * straight into elements that hold nothing). A hint at a message completed here is cleared. */
void gfh_place(const uint8_t *buf, const uint32_t *off, const uint32_t *len, int i, int n, uint32_t tensor_len,
               uint8_t *values, uint8_t *have, uint8_t *seqs, int64_t received, int mode, int64_t *res,
               int mark, const uint64_t *pay, const uint32_t *src_ip, const uint16_t *src_port,
               struct gfh_hint *hint) {
    const uint8_t m = (uint8_t)mark;
    for (int k = 0; k < R_SLOTS; k++) res[k] = 0;
    int ahead = mode == 3;
    if (ahead) mode = 0;
    int last = -1; /* the last packet placed */
    int j = i;
    for (; j < n; j++) {
        const uint8_t *p = buf + off[j];
        uint32_t offset = be32(p + 12), count = be16(p + 20), seq = be32(p + 24);
        if (count == 0 || (uint64_t)offset + count > tensor_len || seq >= tensor_len) {
            res[R_OOB]++;
            continue;
        }
        if (len[j] != HDR + 4 * count) {
            res[R_PAYLOAD]++;
            continue;
        }
        if (mode == 1) {
            res[R_OTHER]++;
            continue;
        }
        if (values == NULL) break;
        res[R_DATA]++;
        if (seqs[seq] == m) {
            res[R_DUP]++;
            continue;
        }
        seqs[seq] = m;
        const uint8_t *src = pay && pay[j] ? (const uint8_t *)(uintptr_t)pay[j] : p + HDR;
        last = j;
        if (memchr(have + offset, m, count) == NULL) {
            if (mode == 2)
                add_f32(values + (size_t)offset * 4, src, count);
            else if (src != values + (size_t)offset * 4) /* else read there already (gfh_recv) */
                memcpy(values + (size_t)offset * 4, src, (size_t)count * 4);
            res[R_RECEIVED] += count;
        } else {
            for (uint32_t e = 0; e < count; e++) {
                if (have[offset + e] != m) {
                    if (mode == 2)
                        add_f32(values + (size_t)(offset + e) * 4, src + (size_t)e * 4, 1);
                    else
                        memcpy(values + (size_t)(offset + e) * 4, src + (size_t)e * 4, 4);
                    res[R_RECEIVED]++;
                }
            }
        }
        memset(have + offset, m, count);
        if (received + res[R_RECEIVED] == (int64_t)tensor_len) {
            j++;
            break;
        }
    }
    res[R_USED] = j;
    if (!hint) return;
    if (received + res[R_RECEIVED] == (int64_t)tensor_len) { /* complete: nothing more goes there */
        if (hint->values == values) hint->values = NULL;
    } else if (ahead && last >= 0) { /* the next packets of this message from this source */
        const uint8_t *p = buf + off[last];
        memcpy(hint->hdr, p, HDR);
        hint->values = values;
        hint->have = have;
        hint->mark = mark;
        hint->tensor_len = tensor_len;
        hint->count = be16(p + 20);
        hint->next = be32(p + 12) + hint->count;
        hint->src_ip = src_ip[last];
        hint->src_port = src_port[last];
    }
}

/* Magnitude class (class_of) of each run of `count` values (the last run may be shorter). */
void gfh_classes(const float *values, int64_t n, uint32_t count, uint8_t *out) {
    int64_t rows = (n + count - 1) / count;
    for (int64_t r = 0; r < rows; r++) {
        int64_t lo = r * count, hi = lo + count < n ? lo + count : n;
        out[r] = class_of((const uint8_t *)(values + lo), hi - lo);
    }
}

