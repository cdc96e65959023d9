/* Which message the next datagrams belong to, asked of the socket before a batch is read:
 * compiled after hosts/fastpath.c and hosts/answers.c as one unit (hosts/fastpath.py joins the
 * sources), whose HDR, be16, be32, hint_agrees, struct gfh_hint and struct gfh_answers it uses.
 *
 * gfh_recv reads a batch's values straight into the message its hint points at. With two
 * messages in flight their runs alternate, so a hint left at the message the last run placed
 * often points at the other one: the batch is then read into the slots and copied from there
 * (or copied back). gfh_ahead peeks at the header of the next queued datagram (MSG_PEEK, 28
 * bytes) and, when it is the data of another registered open message placed ahead (mode 3,
 * from its registered source), points the hint at that message's next packet, so the batch
 * lands in place; gfh_recv's checks then decide, packet by packet, what stays. When it is the
 * data of no registered message (a new message, whose first run is read into the slots and
 * copied from there until Python opens it), the batch is FIRST_SLOTS datagrams. */
#define FIRST_SLOTS 2

/* Cap *slots at the packets of `count` values a message of `tensor_len` elements has from
 * element `offset` on (at least 2): a batch then ends with its message, not in the next one's
 * first packets (which the hint would misplace). */
static void cap_left(int *slots, uint32_t tensor_len, uint32_t offset, uint32_t count) {
    uint32_t left = (tensor_len - offset + count - 1) / count;
    if (left < 2) left = 2;
    if ((uint32_t)*slots > left) *slots = (int)left;
}

/* Point `h` at the message of the next queued datagram (see above). Returns 0 when nothing is
 * queued, -errno on a socket error, else 1; h->entry is the answers entry the hint now points
 * into (-1: left as it was), and *slots is capped at what that message has left from there
 * (at least 2), as hosts/fastpath.py caps a hinted batch, or at FIRST_SLOTS for a message
 * not registered. */
static int gfh_ahead(int fd, struct gfh_answers *a, struct gfh_hint *h, uint32_t slot_size, int *slots) {
    uint8_t b[HDR];
    struct sockaddr_in from;
    socklen_t fl = sizeof from;
    ssize_t r;
    h->entry = -1;
    do {
        r = recvfrom(fd, b, HDR, MSG_PEEK | MSG_DONTWAIT, (struct sockaddr *)&from, &fl);
    } while (r < 0 && errno == EINTR);
    if (r < 0) return (errno == EAGAIN || errno == EWOULDBLOCK) ? 0 : -errno;
    if (r < HDR || fl < sizeof from || (b[0] >> 4) != 1 || (b[0] & 0x0F) > 1 || (b[1] & 0xF0)) return 1;
    uint32_t offset = be32(b + 12), count = be16(b + 20), tensor_len = be32(b + 16);
    uint32_t ip = from.sin_addr.s_addr;
    uint16_t port = from.sin_port;
    if (count == 0 || HDR + 4 * count > slot_size || 2 * (HDR + 4 * count) <= slot_size) return 1;
    if (h->values && hint_agrees(h, b, ip, port) && offset == h->next) { /* where it points */
        cap_left(slots, h->tensor_len, offset, count);
        return 1;
    }
    int k = -1;
    for (int c = 0; c < a->top && k < 0; c++) {
        const struct gfh_entry *e = &a->e[c];
        if (e->used == 1 && !e->left && e->values && e->src_ip == ip && e->src_port == port &&
            e->kind == (b[0] & 0x0F) && e->tensor_len == tensor_len && memcmp(e->key, b + 2, 10) == 0)
            k = c;
    }
    if (k < 0) { /* a new message: its first packets into the slots, the next ones in place */
        if (*slots > FIRST_SLOTS) *slots = FIRST_SLOTS;
        return 1;
    }
    const struct gfh_entry *e = &a->e[k];
    if (e->mode != 3 || (uint64_t)offset + count > tensor_len) return 1;
    memcpy(h->hdr, b, HDR);
    h->values = e->values;
    h->have = e->have;
    h->mark = e->mark;
    h->tensor_len = tensor_len;
    h->count = count;
    h->next = offset;
    h->src_ip = ip;
    h->src_port = port;
    h->entry = k;
    cap_left(slots, tensor_len, offset, count);
    return 1;
}
