/* Sends one frame over an AF_PACKET socket as fast as sendmmsg allows, for a given time, or at
 * RATE frames/s (batches spaced evenly) when given.
 * Usage: blaster IFACE FRAME_HEX SECONDS [RATE]. Prints the number of frames the kernel accepted.
 * Built by tests/benchmarks/bench_switch.py with the system C compiler. */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#define BATCH 64

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv) {
    if (argc != 4 && argc != 5) { fprintf(stderr, "usage: %s IFACE FRAME_HEX SECONDS [RATE]\n", argv[0]); return 2; }
    double rate = argc == 5 ? atof(argv[4]) : 0.0;
    size_t len = strlen(argv[2]) / 2;
    unsigned char frame[2048];
    if (len > sizeof frame || len < 14) { fprintf(stderr, "frame of %zu bytes\n", len); return 2; }
    for (size_t i = 0; i < len; i++) sscanf(argv[2] + 2 * i, "%2hhx", &frame[i]);
    int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    if (fd < 0) { perror("socket"); return 1; }
    struct sockaddr_ll addr = {.sll_family = AF_PACKET, .sll_ifindex = (int)if_nametoindex(argv[1])};
    if (!addr.sll_ifindex || bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0) { perror(argv[1]); return 1; }
    struct iovec iov = {.iov_base = frame, .iov_len = len};
    struct mmsghdr msgs[BATCH];
    memset(msgs, 0, sizeof msgs);
    for (int i = 0; i < BATCH; i++) { msgs[i].msg_hdr.msg_iov = &iov; msgs[i].msg_hdr.msg_iovlen = 1; }
    double start = now(), end = start + atof(argv[3]);
    unsigned long long sent = 0;
    while (now() < end) {
        if (rate > 0) {  /* the next batch leaves when the rate allows it (sleeping, not spinning) */
            double due = start + sent / rate;
            struct timespec ts = {.tv_sec = (time_t)due, .tv_nsec = (long)((due - (double)(time_t)due) * 1e9)};
            clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL);
        }
        int n = sendmmsg(fd, msgs, BATCH, 0);
        if (n > 0) sent += (unsigned long long)n;
    }
    printf("%llu\n", sent);
    return 0;
}
