/* State of one loaded program and the control-plane API over it (tables, counters,
 * registers, meters, multicast groups). Validation happens before these calls (the same
 * checks as the Python pipeline); these functions store and read. Writers take the
 * program's write lock, packet threads its read lock. */
#ifndef GF_STATE_H
#define GF_STATE_H

#include "gf_runtime.h"

typedef struct {
    int nkeys; uint8_t kinds[GF_MAXK]; uint8_t widths[GF_MAXK];
} gf_table_desc;

/* Action profiles and selectors: members (an action and its data) and groups (members) by
 * slot; the control plane maps the P4Runtime ids to slots and never reuses a slot for
 * another id. A table entry names a member or group with these action codes, the slot in
 * its first data word. */
#define GF_REF_MEMBER (-2)
#define GF_REF_GROUP (-3)
typedef struct { int32_t action; int32_t live; uint64_t args[GF_MAXA]; } gf_member;
typedef struct { uint32_t n; int32_t live; uint32_t *members; } gf_group;
typedef struct { gf_member *m; uint32_t nm; gf_group *g; uint32_t ng; } gf_profile;
/* A parser value set: n members of `stride` words, (value, mask) or (low, high) per field. */
typedef struct { uint32_t n, stride; uint64_t *items; } gf_vset;

typedef struct gf_prog {
    pthread_rwlock_t lock;
    int ntables, ncounters, nregisters, nmeters;
    gf_table *tables;
    gf_counter *counters;
    gf_register *registers;
    gf_meter *meters;
    gf_mgroup *groups; uint32_t ngroups;  /* indexed by group id (grown on demand) */
    gf_mgroup *sessions; uint32_t nsessions;  /* clone sessions, by session id (grown on demand) */
    gf_profile *profiles; int nprofiles;
    gf_vset *vsets; int nvsets;
    uint64_t order;
} gf_prog;

static void gf_table_init(gf_table *t, const gf_table_desc *d) {
    memset(t, 0, sizeof(*t));
    t->nkeys = d->nkeys;
    memcpy(t->kinds, d->kinds, GF_MAXK);
    memcpy(t->widths, d->widths, GF_MAXK);
    int lpm = 0, other = 0;
    t->lpm_index = -1;
    for (int i = 0; i < d->nkeys; i++) {
        if (d->kinds[i] == GF_LPM) { lpm++; t->lpm_index = i; }
        else if (d->kinds[i] != GF_EXACT) other++;
    }
    t->hashed = other == 0 && lpm <= 1;
    if (!t->hashed) t->lpm_index = -1;
}

static void gf_table_free(gf_table *t) { free(t->e); free(t->freelist); free(t->hidx); free(t->sorted); }

static int gf_rank_before(const gf_entry *a, const gf_entry *b) {
    return a->rank != b->rank ? a->rank > b->rank : a->order < b->order;
}

static void gf_sorted_insert(gf_table *t, uint32_t idx) {
    t->sorted = realloc(t->sorted, sizeof(uint32_t) * (t->nsorted + 1));
    uint32_t lo = 0, hi = t->nsorted;
    while (lo < hi) {
        uint32_t mid = (lo + hi) / 2;
        if (gf_rank_before(&t->e[t->sorted[mid]], &t->e[idx])) lo = mid + 1; else hi = mid;
    }
    memmove(&t->sorted[lo + 1], &t->sorted[lo], sizeof(uint32_t) * (t->nsorted - lo));
    t->sorted[lo] = idx; t->nsorted++;
}

static void gf_sorted_remove(gf_table *t, uint32_t idx) {
    for (uint32_t i = 0; i < t->nsorted; i++) if (t->sorted[i] == idx) {
        memmove(&t->sorted[i], &t->sorted[i + 1], sizeof(uint32_t) * (t->nsorted - i - 1));
        t->nsorted--; return;
    }
}

/* Install an entry: values, masks and range highs per key field (LPM: value and prefix
 * mask, `plen` its length); returns the entry's handle. */
GF_EXPORT int64_t gf_table_insert(gf_prog *p, int tid, const uint64_t *v, const uint64_t *m,
                                  const uint64_t *hi, int64_t rank, uint32_t plen, int32_t action,
                                  const uint64_t *args, int nargs) {
    if (tid < 0 || tid >= p->ntables || nargs > GF_MAXA) return -1;
    pthread_rwlock_wrlock(&p->lock);
    gf_table *t = &p->tables[tid];
    uint32_t idx;
    if (t->nfree) idx = t->freelist[--t->nfree];
    else {
        if (t->used == t->cap) {
            uint32_t cap = t->cap ? t->cap * 2 : 64;
            gf_entry *ne = realloc(t->e, sizeof(gf_entry) * cap);
            if (!ne) { pthread_rwlock_unlock(&p->lock); return -1; }
            t->e = ne; t->cap = cap;
        }
        idx = t->used++;
    }
    gf_entry *e = &t->e[idx];
    memset(e, 0, sizeof(*e));
    for (int i = 0; i < t->nkeys; i++) { e->v[i] = v[i]; e->m[i] = m[i]; e->hi[i] = hi[i]; }
    e->rank = rank; e->order = ++p->order; e->plen = t->lpm_index >= 0 ? plen : 0;
    e->action = action;
    memcpy(e->args, args, sizeof(uint64_t) * nargs);
    if (t->hashed) {
        if (gf_hash_put(t, idx) != 0) {  /* out of memory: the slot goes back, nothing changed */
            t->freelist = realloc(t->freelist, sizeof(uint32_t) * (t->nfree + 1));
            t->freelist[t->nfree++] = idx;
            pthread_rwlock_unlock(&p->lock);
            return -1;
        }
        t->plen_count[e->plen]++;
    }
    else gf_sorted_insert(t, idx);
    e->live = 1;
    pthread_rwlock_unlock(&p->lock);
    return idx;
}

GF_EXPORT int gf_table_modify(gf_prog *p, int tid, int64_t h, int32_t action, const uint64_t *args, int nargs) {
    if (tid < 0 || tid >= p->ntables || nargs > GF_MAXA) return -1;
    pthread_rwlock_wrlock(&p->lock);
    gf_table *t = &p->tables[tid];
    int rc = -1;
    if (h >= 0 && (uint64_t)h < t->used && t->e[h].live) {
        t->e[h].action = action;
        memset(t->e[h].args, 0, sizeof(t->e[h].args));
        memcpy(t->e[h].args, args, sizeof(uint64_t) * nargs);
        rc = 0;
    }
    pthread_rwlock_unlock(&p->lock);
    return rc;
}

GF_EXPORT int gf_table_delete(gf_prog *p, int tid, int64_t h) {
    if (tid < 0 || tid >= p->ntables) return -1;
    pthread_rwlock_wrlock(&p->lock);
    gf_table *t = &p->tables[tid];
    int rc = -1;
    if (h >= 0 && (uint64_t)h < t->used && t->e[h].live) {
        gf_entry *e = &t->e[h];
        e->live = 0;
        if (t->hashed) { gf_hash_del(t, (uint32_t)h); t->plen_count[e->plen]--; }
        else gf_sorted_remove(t, (uint32_t)h);
        t->freelist = realloc(t->freelist, sizeof(uint32_t) * (t->nfree + 1));
        t->freelist[t->nfree++] = (uint32_t)h;
        rc = 0;
    }
    pthread_rwlock_unlock(&p->lock);
    return rc;
}

GF_EXPORT int gf_table_set_default(gf_prog *p, int tid, int32_t action, const uint64_t *args, int nargs) {
    if (tid < 0 || tid >= p->ntables || nargs > GF_MAXA) return -1;
    pthread_rwlock_wrlock(&p->lock);
    gf_table *t = &p->tables[tid];
    t->def_action = action;
    memset(t->def_args, 0, sizeof(t->def_args));
    memcpy(t->def_args, args, sizeof(uint64_t) * nargs);
    pthread_rwlock_unlock(&p->lock);
    return 0;
}

/* Direct counter of an entry: read (out != 0) and/or write (set != 0). */
GF_EXPORT int gf_table_counter(gf_prog *p, int tid, int64_t h, uint64_t *out, const uint64_t *set) {
    if (tid < 0 || tid >= p->ntables) return -1;
    gf_table *t = &p->tables[tid];
    pthread_rwlock_wrlock(&p->lock);
    if (h < 0 || (uint64_t)h >= t->used || !t->e[h].live) { pthread_rwlock_unlock(&p->lock); return -1; }
    if (out) { out[0] = t->e[h].packets; out[1] = t->e[h].bytes; }
    if (set) { t->e[h].packets = set[0]; t->e[h].bytes = set[1]; }
    pthread_rwlock_unlock(&p->lock);
    return 0;
}

GF_EXPORT int gf_counter_access(gf_prog *p, int cid, uint32_t index, uint64_t *out, const uint64_t *set) {
    if (cid < 0 || cid >= p->ncounters || index >= p->counters[cid].size) return -1;
    gf_counter *c = &p->counters[cid];
    if (out) { out[0] = __atomic_load_n(&c->packets[index], __ATOMIC_RELAXED);
               out[1] = __atomic_load_n(&c->bytes[index], __ATOMIC_RELAXED); }
    if (set) { __atomic_store_n(&c->packets[index], set[0], __ATOMIC_RELAXED);
               __atomic_store_n(&c->bytes[index], set[1], __ATOMIC_RELAXED); }
    return 0;
}

GF_EXPORT int gf_register_access(gf_prog *p, int rid, uint32_t index, uint64_t *out, const uint64_t *set) {
    if (rid < 0 || rid >= p->nregisters || index >= p->registers[rid].size) return -1;
    gf_register *r = &p->registers[rid];
    if (out) *out = __atomic_load_n(&r->values[index], __ATOMIC_RELAXED);
    if (set) __atomic_store_n(&r->values[index], *set & gf_mask(r->width), __ATOMIC_RELAXED);
    return 0;
}

/* Meter configuration: cfg = {cir, cburst, pir, pburst}; cfg 0 resets. */
GF_EXPORT int gf_meter_config(gf_prog *p, int mid, uint32_t index, const double *cfg) {
    if (mid < 0 || mid >= p->nmeters || index >= p->meters[mid].size) return -1;
    gf_meter *m = &p->meters[mid];
    pthread_mutex_lock(&m->lock);
    gf_meter_cell *c = &m->cells[index];
    memset(c, 0, sizeof(*c));
    c->last_us = -1;
    if (cfg) {
        c->cir = cfg[0]; c->cburst = (int64_t)cfg[1]; c->pir = cfg[2]; c->pburst = (int64_t)cfg[3];
        c->tc = (double)c->cburst; c->tp = (double)c->pburst; c->configured = 1;
    }
    pthread_mutex_unlock(&m->lock);
    return 0;
}

/* Replace the replicas of group `id` in a table of groups grown on demand (n = 0 empties it). */
static int gf_replicas_set(gf_prog *p, gf_mgroup **table, uint32_t *size, uint32_t id, const uint32_t *ports,
                           const uint32_t *rids, uint32_t n, uint32_t truncate) {
    if (id >= 65536) return -1;
    pthread_rwlock_wrlock(&p->lock);
    if (id >= *size) {
        uint32_t ng = id + 1;
        *table = realloc(*table, sizeof(gf_mgroup) * ng);
        memset(&(*table)[*size], 0, sizeof(gf_mgroup) * (ng - *size));
        *size = ng;
    }
    gf_mgroup *g = &(*table)[id];
    free(g->ports); free(g->rids);
    g->n = n; g->truncate = truncate;
    g->ports = n ? malloc(sizeof(uint32_t) * n) : 0;
    g->rids = n ? malloc(sizeof(uint32_t) * n) : 0;
    if (n) { memcpy(g->ports, ports, sizeof(uint32_t) * n); memcpy(g->rids, rids, sizeof(uint32_t) * n); }
    pthread_rwlock_unlock(&p->lock);
    return 0;
}

/* Replace the replicas of a multicast group (n = 0 deletes it). */
GF_EXPORT int gf_mcast_set(gf_prog *p, uint32_t gid, const uint32_t *ports, const uint32_t *rids, uint32_t n) {
    return gf_replicas_set(p, &p->groups, &p->ngroups, gid, ports, rids, n, 0);
}

/* Replace the replicas of a clone session and its truncation length (n = 0 deletes it). */
GF_EXPORT int gf_clone_set(gf_prog *p, uint32_t sid, const uint32_t *ports, const uint32_t *rids, uint32_t n,
                           uint32_t truncate) {
    return gf_replicas_set(p, &p->sessions, &p->nsessions, sid, ports, rids, n, truncate);
}

/* Clone session `sid`, or 0 when it has no replicas. */
static inline gf_mgroup *gf_session(gf_prog *p, uint64_t sid) {
    return sid < p->nsessions && p->sessions[sid].n ? &p->sessions[sid] : 0;
}

/* Replace the members of value set `vid` (n members of `stride` words each). */
GF_EXPORT int gf_vset_set(gf_prog *p, int vid, const uint64_t *items, uint32_t stride, uint32_t n) {
    if (vid < 0 || vid >= p->nvsets) return -1;
    uint64_t *copy = n ? malloc(sizeof(uint64_t) * stride * n) : 0;
    if (n) memcpy(copy, items, sizeof(uint64_t) * stride * n);
    pthread_rwlock_wrlock(&p->lock);
    gf_vset *v = &p->vsets[vid];
    free(v->items);
    v->items = copy; v->stride = stride; v->n = n;
    pthread_rwlock_unlock(&p->lock);
    return 0;
}

/* `arr` of *n elements of `size` bytes grown (doubling, new ones zeroed) to hold `index`. */
static void *gf_grow(void *arr, uint32_t *n, size_t size, uint32_t index) {
    if (index < *n) return arr;
    uint32_t grown = index + 1 > 2 * *n ? index + 1 : 2 * *n;
    arr = realloc(arr, size * grown);
    memset((uint8_t *)arr + size * *n, 0, size * (grown - *n));
    *n = grown;
    return arr;
}

/* Set the member at `slot` of profile `pid` (live 0: deleted). */
GF_EXPORT int gf_profile_member(gf_prog *p, int pid, uint32_t slot, int32_t action, const uint64_t *args,
                                int nargs, int live) {
    if (pid < 0 || pid >= p->nprofiles || nargs > GF_MAXA || slot >= (1u << 24)) return -1;
    pthread_rwlock_wrlock(&p->lock);
    gf_profile *f = &p->profiles[pid];
    f->m = gf_grow(f->m, &f->nm, sizeof(gf_member), slot);
    gf_member *m = &f->m[slot];
    m->action = action; m->live = live;
    memset(m->args, 0, sizeof(m->args));
    if (nargs) memcpy(m->args, args, sizeof(uint64_t) * nargs);
    pthread_rwlock_unlock(&p->lock);
    return 0;
}

/* Set the group at `slot` of profile `pid` to the member slots given (live 0: deleted). */
GF_EXPORT int gf_profile_group(gf_prog *p, int pid, uint32_t slot, const uint32_t *members, uint32_t n, int live) {
    if (pid < 0 || pid >= p->nprofiles || slot >= (1u << 24)) return -1;
    uint32_t *copy = n ? malloc(sizeof(uint32_t) * n) : 0;
    if (n) memcpy(copy, members, sizeof(uint32_t) * n);
    pthread_rwlock_wrlock(&p->lock);
    gf_profile *f = &p->profiles[pid];
    f->g = gf_grow(f->g, &f->ng, sizeof(gf_group), slot);
    gf_group *g = &f->g[slot];
    free(g->members);
    g->members = copy; g->n = n; g->live = live;
    pthread_rwlock_unlock(&p->lock);
    return 0;
}

/* The member a GF_REF_MEMBER or GF_REF_GROUP entry names (a group's member picked by
 * `hash`); NULL when the member or group is gone or the group is empty (the table's default
 * action runs then). */
static inline const gf_member *gf_profile_pick(const gf_profile *f, int32_t action, uint64_t slot, uint64_t hash) {
    if (action == GF_REF_GROUP) {
        if (slot >= f->ng || !f->g[slot].live || !f->g[slot].n) return 0;
        slot = f->g[slot].members[hash % f->g[slot].n];
    }
    return slot < f->nm && f->m[slot].live ? &f->m[slot] : 0;
}

static gf_prog *gf_prog_new(int ntables, const gf_table_desc *tds, int ncounters, const uint32_t *csizes,
                            int nregisters, const uint32_t *rsizes, const unsigned *rwidths,
                            int nmeters, const uint32_t *msizes, const int *mbytes, int nprofiles,
                            int nvsets) {
    gf_prog *p = calloc(1, sizeof(gf_prog));
    p->nvsets = nvsets;
    p->vsets = calloc(nvsets ? nvsets : 1, sizeof(gf_vset));
    p->nprofiles = nprofiles;
    p->profiles = calloc(nprofiles ? nprofiles : 1, sizeof(gf_profile));
    pthread_rwlock_init(&p->lock, 0);
    p->ntables = ntables; p->ncounters = ncounters; p->nregisters = nregisters; p->nmeters = nmeters;
    p->tables = calloc(ntables ? ntables : 1, sizeof(gf_table));
    for (int i = 0; i < ntables; i++) gf_table_init(&p->tables[i], &tds[i]);
    p->counters = calloc(ncounters ? ncounters : 1, sizeof(gf_counter));
    for (int i = 0; i < ncounters; i++) {
        p->counters[i].size = csizes[i];
        p->counters[i].packets = calloc(csizes[i] ? csizes[i] : 1, 8);
        p->counters[i].bytes = calloc(csizes[i] ? csizes[i] : 1, 8);
    }
    p->registers = calloc(nregisters ? nregisters : 1, sizeof(gf_register));
    for (int i = 0; i < nregisters; i++) {
        p->registers[i].size = rsizes[i]; p->registers[i].width = rwidths[i];
        p->registers[i].values = calloc(rsizes[i] ? rsizes[i] : 1, 8);
    }
    p->meters = calloc(nmeters ? nmeters : 1, sizeof(gf_meter));
    for (int i = 0; i < nmeters; i++) {
        p->meters[i].size = msizes[i]; p->meters[i].bytes_unit = mbytes[i];
        p->meters[i].cells = calloc(msizes[i] ? msizes[i] : 1, sizeof(gf_meter_cell));
        for (uint32_t k = 0; k < msizes[i]; k++) p->meters[i].cells[k].last_us = -1;
        pthread_mutex_init(&p->meters[i].lock, 0);
    }
    return p;
}

GF_EXPORT void gf_prog_free(gf_prog *p) {
    if (!p) return;
    for (int i = 0; i < p->ntables; i++) gf_table_free(&p->tables[i]);
    for (int i = 0; i < p->ncounters; i++) { free(p->counters[i].packets); free(p->counters[i].bytes); }
    for (int i = 0; i < p->nregisters; i++) free(p->registers[i].values);
    for (int i = 0; i < p->nmeters; i++) free(p->meters[i].cells);
    for (uint32_t i = 0; i < p->ngroups; i++) { free(p->groups[i].ports); free(p->groups[i].rids); }
    for (int i = 0; i < p->nprofiles; i++) {
        for (uint32_t k = 0; k < p->profiles[i].ng; k++) free(p->profiles[i].g[k].members);
        free(p->profiles[i].m); free(p->profiles[i].g);
    }
    free(p->profiles);
    for (int i = 0; i < p->nvsets; i++) free(p->vsets[i].items);
    free(p->vsets);
    for (uint32_t i = 0; i < p->nsessions; i++) { free(p->sessions[i].ports); free(p->sessions[i].rids); }
    free(p->tables); free(p->counters); free(p->registers); free(p->meters); free(p->groups); free(p->sessions);
    pthread_rwlock_destroy(&p->lock);
    free(p);
}

#endif
