/* Runtime of the native datapath: bit access, checksums and hashes, match-action tables,
 * counters, registers, meters and the replication engine. Included once by the C file the
 * generator writes for a program (which defines GF_NSLOTS first); state lives in gf_prog and
 * is read and written by the control plane through the gf_* functions exported below. */
#ifndef GF_RUNTIME_H
#define GF_RUNTIME_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GF_EXPORT __attribute__((visibility("default")))
#ifndef GF_MAXK
#define GF_MAXK 8          /* key fields per table (a program with more defines its own) */
#endif
#define GF_MAXA 16         /* action data per entry */
#define GF_MAXFRAME (65535 + 64)  /* largest frame in or out: a 64 KiB IP packet (the largest MTU) and its link header */
#define GF_DIGEST_WORDS 128  /* digests one packet may send: [id, n, values...] each */
#define GF_LOG_ID 0x40000000u  /* digest words with id GF_LOG_ID + k: the values of log_msg k */
#define GF_DROP 511

typedef unsigned __int128 gf_u128;

static inline uint64_t gf_mask(unsigned w) { return w >= 64 ? ~(uint64_t)0 : (((uint64_t)1 << w) - 1); }

/* A signed int<w> value lives in its slot sign-extended to 64 bits (as two's complement);
 * GF_SIGNED(w) as the width of gf_get reads a field of type int<w>. */
#define GF_SIGNED_BIT 0x100u
#define GF_SIGNED(w) ((w) | GF_SIGNED_BIT)
static inline uint64_t gf_sext(uint64_t v, unsigned w) {
    return w >= 64 ? v : (uint64_t)((int64_t)(v << (64 - w)) >> (64 - w));
}

/* `w` bits (w <= 64; GF_SIGNED(w): sign-extended) at bit offset `off` (MSB first) of `d`. */
static inline uint64_t gf_get(const uint8_t *d, unsigned off, unsigned w) {
    unsigned sgn = w & GF_SIGNED_BIT;
    w &= ~GF_SIGNED_BIT;
    unsigned first = off >> 3, last = (off + w - 1) >> 3;
    gf_u128 v = 0;
    for (unsigned i = first; i <= last; i++) v = (v << 8) | d[i];
    unsigned tail = (last + 1) * 8 - (off + w);
    uint64_t r = (uint64_t)(v >> tail) & gf_mask(w);
    return sgn ? gf_sext(r, w) : r;
}

/* OR `w` bits of `v` into `d` at bit offset `off` (the bytes start zeroed). */
static inline void gf_put(uint8_t *d, unsigned off, unsigned w, uint64_t v) {
    w &= ~GF_SIGNED_BIT;
    unsigned first = off >> 3, last = (off + w - 1) >> 3;
    unsigned tail = (last + 1) * 8 - (off + w);
    gf_u128 x = (gf_u128)(v & gf_mask(w)) << tail;
    for (unsigned i = last + 1; i-- > first;) { d[i] |= (uint8_t)x; x >>= 8; }
}

/* A bit<N> value, N > 64, lives in words of its own after the packet's slots, least
 * significant word first (the generator's GF_WSLOT(slot) is the first); `w` bits at `lo`
 * (w <= 64) of such a value of `nw` words. */
static inline uint64_t gf_wslice(const uint64_t *v, unsigned nw, unsigned lo, unsigned w) {
    unsigned i = lo / 64, sh = lo % 64;
    uint64_t r = v[i] >> sh;
    if (sh && i + 1 < nw) r |= v[i + 1] << (64 - sh);
    return r & gf_mask(w);
}

/* Varbit bits, MSB first: load n bits of `src` from bit `off` into `dst` (left-aligned);
 * store n left-aligned bits of `src` into `dst` at bit `off` (the bytes start zeroed). */
static inline void gf_vb_load(uint8_t *dst, const uint8_t *src, uint32_t off, uint32_t n) {
    for (uint32_t k = 0; 8 * k < n; k++) {
        unsigned w = n - 8 * k < 8 ? n - 8 * k : 8;
        dst[k] = (uint8_t)(gf_get(src, off + 8 * k, w) << (8 - w));
    }
}
static inline void gf_vb_store(uint8_t *dst, uint32_t off, const uint8_t *src, uint32_t n) {
    for (uint32_t k = 0; 8 * k < n; k++) {
        unsigned w = n - 8 * k < 8 ? n - 8 * k : 8;
        gf_put(dst, off + 8 * k, w, (uint64_t)(src[k] >> (8 - w)));
    }
}

static inline uint64_t gf_shl(uint64_t a, uint64_t b) { return b >= 64 ? 0 : a << b; }
static inline uint64_t gf_shr(uint64_t a, uint64_t b) { return b >= 64 ? 0 : a >> b; }
static inline uint64_t gf_div(uint64_t a, uint64_t b) { return b ? a / b : 0; }
static inline uint64_t gf_mod(uint64_t a, uint64_t b) { return b ? a % b : 0; }
static inline uint64_t gf_satadd(uint64_t a, uint64_t b, unsigned w) {
    uint64_t m = gf_mask(w), r = a + b; return (r > m || r < a) ? m : r;
}
static inline uint64_t gf_satsub(uint64_t a, uint64_t b) { return a > b ? a - b : 0; }
/* Signed arithmetic on sign-extended values of int<w>: shift right (arithmetic), compare,
 * saturating add and subtract (P4's |+| and |-| clamp to the type's range). */
static inline uint64_t gf_sar(uint64_t a, uint64_t b) { return (uint64_t)((int64_t)a >> (b >= 63 ? 63 : b)); }
static inline int64_t gf_s(uint64_t a) { return (int64_t)a; }
static inline uint64_t gf_ssat(uint64_t a, uint64_t b, unsigned w, int sub) {
    int64_t hi = w >= 64 ? INT64_MAX : (int64_t)(((uint64_t)1 << (w - 1)) - 1), lo = -hi - 1, r;
    if (sub ? __builtin_sub_overflow((int64_t)a, (int64_t)b, &r) : __builtin_add_overflow((int64_t)a, (int64_t)b, &r))
        return (uint64_t)((int64_t)b < 0 ? (sub ? hi : lo) : (sub ? lo : hi));
    return (uint64_t)(r > hi ? hi : r < lo ? lo : r);
}

/* ---- checksums and hashes over packed bytes (BMv2's definitions) ---- */

static inline uint64_t gf_csum16(const uint8_t *d, uint32_t n, const uint8_t *d2, uint32_t n2) {
    uint64_t sum = 0; uint32_t i; int odd = 0; uint8_t carry = 0;
    for (i = 0; i + 1 < n; i += 2) sum += ((uint32_t)d[i] << 8) | d[i + 1];
    if (n & 1) { odd = 1; carry = d[n - 1]; }
    for (i = 0; i < n2; i++) {
        if (odd) { sum += ((uint32_t)carry << 8) | d2[i]; odd = 0; }
        else { carry = d2[i]; odd = 1; }
    }
    if (odd) sum += (uint32_t)carry << 8;
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    return (~sum) & 0xFFFF;
}

static inline uint64_t gf_crc16(const uint8_t *d, uint32_t n) {
    uint32_t crc = 0;
    for (uint32_t i = 0; i < n; i++) {
        crc ^= d[i];
        for (int k = 0; k < 8; k++) crc = (crc & 1) ? (crc >> 1) ^ 0xA001 : crc >> 1;
    }
    return crc & 0xFFFF;
}

static inline uint64_t gf_crc32(const uint8_t *d, uint32_t n) {
    uint32_t crc = 0xFFFFFFFFu;
    for (uint32_t i = 0; i < n; i++) {
        crc ^= d[i];
        for (int k = 0; k < 8; k++) crc = (crc & 1) ? (crc >> 1) ^ 0xEDB88320u : crc >> 1;
    }
    return crc ^ 0xFFFFFFFFu;
}

static inline uint64_t gf_xor16(const uint8_t *d, uint32_t n) {
    uint64_t v = 0;
    for (uint32_t i = 0; i < n; i += 2) v ^= ((uint32_t)d[i] << 8) | (i + 1 < n ? d[i + 1] : 0);
    return v;
}

static inline uint64_t gf_identity(const uint8_t *d, uint32_t n) {
    uint64_t v = 0; uint32_t i = n > 8 ? n - 8 : 0;
    for (; i < n; i++) v = (v << 8) | d[i];
    return v;
}

static inline uint64_t gf_rand(uint64_t *state) {  /* xorshift64* */
    uint64_t x = *state; x ^= x >> 12; x ^= x << 25; x ^= x >> 27; *state = x;
    return x * 0x2545F4914F6CDD1DULL;
}

/* ---- match-action tables ---- */

enum { GF_EXACT = 0, GF_LPM = 1, GF_TERNARY = 2, GF_RANGE = 3, GF_OPTIONAL = 4 };

typedef struct {
    uint64_t v[GF_MAXK], m[GF_MAXK], hi[GF_MAXK];  /* value, mask (0: wildcard), range high */
    int64_t rank;        /* priority (ternary/range/optional) or total prefix length */
    uint64_t order;      /* insertion order: the earlier wins a tie */
    uint32_t plen;       /* prefix length of the LPM field (hash-indexed tables) */
    int32_t action;
    int32_t live;
    uint64_t args[GF_MAXA];
    uint64_t packets, bytes;  /* direct counter */
} gf_entry;

typedef struct {
    int nkeys, hashed, lpm_index;
    uint8_t kinds[GF_MAXK], widths[GF_MAXK];
    gf_entry *e; uint32_t cap, used;     /* entries; handles are indices */
    uint32_t *freelist; uint32_t nfree;
    int32_t *hidx; uint32_t hcap, hcount;  /* open addressing: handles, -1 empty */
    uint32_t plen_count[65];
    uint32_t *sorted; uint32_t nsorted;  /* scanned tables: entries by rank, then order */
    int32_t def_action; uint64_t def_args[GF_MAXA];
} gf_table;

static uint64_t gf_key_hash(const uint64_t *k, int n, uint32_t plen) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ plen;
    for (int i = 0; i < n; i++) { h ^= k[i]; h *= 0xFF51AFD7ED558CCDULL; h ^= h >> 33; }
    return h;
}

/* The index of a hashed table: open addressing with linear probing over entry handles, one
 * slot per live entry and no tombstones (a deletion shifts the entries after it back), at
 * most half full and resized to a quarter full when it grows past half or shrinks below an
 * eighth (never under GF_HMIN slots), so deleted slots are reclaimed. */
#define GF_HMIN 64u

static inline uint32_t gf_hash_home(const gf_table *t, const uint64_t *k, uint32_t plen) {
    return (uint32_t)gf_key_hash(k, t->nkeys, plen) & (t->hcap - 1);
}

/* Slots for n entries: the smallest power of two, at least GF_HMIN, holding them a quarter full. */
static uint32_t gf_hash_cap_for(uint32_t n) {
    uint32_t cap = GF_HMIN;
    while (cap < 4 * (uint64_t)n && cap < (1u << 31)) cap <<= 1;
    return cap;
}

/* Put handle idx in the first free slot from its home (there is one: the index is at most half full). */
static void gf_hash_place(gf_table *t, uint32_t idx) {
    const gf_entry *e = &t->e[idx];
    uint32_t mask = t->hcap - 1, pos = gf_hash_home(t, e->v, e->plen);
    while (t->hidx[pos] >= 0) pos = (pos + 1) & mask;
    t->hidx[pos] = (int32_t)idx; t->hcount++;
}

/* A fresh index of `cap` slots holding every live entry; -1 (index unchanged) when out of memory. */
static int gf_hash_resize(gf_table *t, uint32_t cap) {
    int32_t *slots = malloc(sizeof(int32_t) * cap);
    if (!slots) return -1;
    free(t->hidx);
    t->hidx = slots; t->hcap = cap; t->hcount = 0;
    for (uint32_t i = 0; i < cap; i++) slots[i] = -1;
    for (uint32_t i = 0; i < t->used; i++) if (t->e[i].live) gf_hash_place(t, i);
    return 0;
}

/* Add entry idx, which must not be live yet (the caller marks it live afterwards, so a resize
 * here does not place it twice); -1 when out of memory. */
static int gf_hash_put(gf_table *t, uint32_t idx) {
    if ((t->hcount + 1) * 2 > t->hcap && gf_hash_resize(t, gf_hash_cap_for(t->hcount + 1)) != 0) return -1;
    gf_hash_place(t, idx);
    return 0;
}

/* Remove entry idx, already marked dead (its key unchanged, so a shrinking resize here does
 * not place it again): later entries of its probe run that may move into the hole do, so
 * every entry stays reachable from its home without tombstones. */
static void gf_hash_del(gf_table *t, uint32_t idx) {
    if (!t->hcap) return;
    const gf_entry *e = &t->e[idx];
    uint32_t mask = t->hcap - 1, hole = gf_hash_home(t, e->v, e->plen);
    while (t->hidx[hole] != (int32_t)idx) {
        if (t->hidx[hole] == -1) return;  /* not indexed */
        hole = (hole + 1) & mask;
    }
    for (uint32_t j = (hole + 1) & mask; t->hidx[j] != -1; j = (j + 1) & mask) {
        const gf_entry *o = &t->e[t->hidx[j]];
        uint32_t h = gf_hash_home(t, o->v, o->plen);
        /* o stays when its home lies cyclically in (hole, j]; otherwise it fills the hole */
        int stays = hole < j ? (h > hole && h <= j) : (h > hole || h <= j);
        if (!stays) { t->hidx[hole] = t->hidx[j]; hole = j; }
    }
    t->hidx[hole] = -1; t->hcount--;
    if (t->hcap > GF_HMIN && (uint64_t)t->hcount * 8 < t->hcap) gf_hash_resize(t, gf_hash_cap_for(t->hcount));
}

static inline gf_entry *gf_hash_find(const gf_table *t, const uint64_t *k, uint32_t plen) {
    if (!t->hcap) return 0;
    uint32_t mask = t->hcap - 1, pos = gf_hash_home(t, k, plen);
    int32_t i;
    while ((i = t->hidx[pos]) != -1) {
        gf_entry *e = &t->e[i];
        if (e->live && e->plen == plen && memcmp(e->v, k, sizeof(uint64_t) * t->nkeys) == 0) return e;
        pos = (pos + 1) & mask;
    }
    return 0;
}

static inline int gf_entry_matches(const gf_table *t, const gf_entry *e, const uint64_t *k) {
    for (int i = 0; i < t->nkeys; i++) {
        switch (t->kinds[i]) {
        case GF_RANGE: if (k[i] < e->v[i] || k[i] > e->hi[i]) return 0; break;
        default: if ((k[i] & e->m[i]) != e->v[i]) return 0;
        }
    }
    return 1;
}

static inline gf_entry *gf_lookup(const gf_table *t, const uint64_t *key) {
    if (t->hashed) {
        if (t->lpm_index < 0) return gf_hash_find(t, key, 0);
        int li = t->lpm_index; unsigned w = t->widths[li];
        uint64_t k[GF_MAXK];
        memcpy(k, key, sizeof(uint64_t) * t->nkeys);
        for (int plen = (int)w; plen >= 0; plen--) {
            if (!t->plen_count[plen]) continue;
            k[li] = key[li] & (gf_mask(w) ^ gf_mask(w - plen));
            gf_entry *e = gf_hash_find(t, k, (uint32_t)plen);
            if (e) return e;
        }
        return 0;
    }
    for (uint32_t i = 0; i < t->nsorted; i++) {
        gf_entry *e = &t->e[t->sorted[i]];
        if (gf_entry_matches(t, e, key)) return e;
    }
    return 0;
}

/* ---- counters, registers, meters, replication ---- */

typedef struct { uint32_t size; uint64_t *packets, *bytes; } gf_counter;
typedef struct { uint32_t size; unsigned width; uint64_t *values; } gf_register;
typedef struct { double cir, pir, tc, tp; int64_t cburst, pburst, last_us; int configured; } gf_meter_cell;
typedef struct { uint32_t size; int bytes_unit; gf_meter_cell *cells; pthread_mutex_t lock; } gf_meter;
typedef struct { uint32_t n; uint32_t *ports, *rids; uint32_t truncate; } gf_mgroup;  /* or a clone session */

static inline void gf_count(gf_counter *c, uint64_t index, uint32_t len) {
    if (index < c->size) {
        __atomic_fetch_add(&c->packets[index], 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&c->bytes[index], len, __ATOMIC_RELAXED);
    }
}

static inline uint64_t gf_meter_execute(gf_meter *m, uint64_t index, uint32_t len, uint64_t now_us) {
    if (index >= m->size) return 0;
    pthread_mutex_lock(&m->lock);
    gf_meter_cell *c = &m->cells[index];
    uint64_t color = 0;
    if (c->configured) {
        double amount = m->bytes_unit ? (double)len : 1.0;
        if (c->last_us >= 0) {
            double dt = (double)((int64_t)now_us > c->last_us ? (int64_t)now_us - c->last_us : 0) / 1e6;
            c->tc = c->tc + c->cir * dt; if (c->tc > (double)c->cburst) c->tc = (double)c->cburst;
            c->tp = c->tp + c->pir * dt; if (c->tp > (double)c->pburst) c->tp = (double)c->pburst;
        }
        c->last_us = (int64_t)now_us;
        if (c->tp < amount) color = 2;
        else if (c->tc < amount) { c->tp -= amount; color = 1; }
        else { c->tp -= amount; c->tc -= amount; }
    }
    pthread_mutex_unlock(&m->lock);
    return color;
}

#endif
