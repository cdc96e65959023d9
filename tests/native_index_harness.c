/* Test harness of the hashed table index (gf_runtime.h, gf_state.h): one table of a given
 * shape, looked up like the packet path does, and a structural check of the index. */
#include "gf_runtime.h"
#include "gf_state.h"

GF_EXPORT gf_prog *gfx_new(int nkeys, const uint8_t *kinds, const uint8_t *widths) {
    gf_table_desc d;
    memset(&d, 0, sizeof(d));
    d.nkeys = nkeys;
    memcpy(d.kinds, kinds, (size_t)nkeys);
    memcpy(d.widths, widths, (size_t)nkeys);
    return gf_prog_new(1, &d, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
}

/* The handle of the entry the packet path would pick for `key`, or -1 (the default). */
GF_EXPORT int64_t gfx_lookup(gf_prog *p, const uint64_t *key) {
    const gf_table *t = &p->tables[0];
    const gf_entry *e = gf_lookup(t, key);
    return e ? (int64_t)(e - t->e) : -1;
}

/* out = {index slots, indexed handles, live entries}. */
GF_EXPORT void gfx_stats(gf_prog *p, uint32_t *out) {
    const gf_table *t = &p->tables[0];
    uint32_t live = 0;
    for (uint32_t i = 0; i < t->used; i++) live += t->e[i].live ? 1u : 0u;
    out[0] = t->hcap; out[1] = t->hcount; out[2] = live;
}

/* 0 when the index is sound, else the first broken rule: 1 a slot names a dead or unknown
 * entry, 2 a live entry appears other than once, 3 a live entry is not reachable from its
 * home slot without crossing an empty one, 4 the count disagrees, 5 more than half full. */
GF_EXPORT int gfx_check(gf_prog *p) {
    const gf_table *t = &p->tables[0];
    uint32_t filled = 0, live = 0;
    for (uint32_t s = 0; s < t->hcap; s++) {
        int32_t i = t->hidx[s];
        if (i == -1) continue;
        if (i < 0 || (uint32_t)i >= t->used || !t->e[i].live) return 1;
        filled++;
    }
    for (uint32_t i = 0; i < t->used; i++) {
        if (!t->e[i].live) continue;
        live++;
        uint32_t seen = 0;
        for (uint32_t s = 0; s < t->hcap; s++) seen += t->hidx[s] == (int32_t)i;
        if (seen != 1) return 2;
        uint32_t mask = t->hcap - 1, pos = gf_hash_home(t, t->e[i].v, t->e[i].plen);
        while (t->hidx[pos] != (int32_t)i) {
            if (t->hidx[pos] == -1) return 3;
            pos = (pos + 1) & mask;
        }
    }
    if (filled != live || t->hcount != live) return 4;
    if (t->hcap && 2 * (uint64_t)t->hcount > t->hcap) return 5;
    return 0;
}
