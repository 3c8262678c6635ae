// SPDX-License-Identifier: MIT OR Apache-2.0
//
// The XDP program under the AF_XDP port backend (dataplane/src/io/xdp.rs,
// `[io] backend = "xdp"`). One copy is loaded per router interface. Every
// frame the router handles is redirected into the AF_XDP socket bound to
// the receive queue it arrived on (the `xsks` map, filled by the router);
// a frame on a queue no socket is bound to goes on to the kernel's stack,
// as does, on a routed port, a frame the router would only drop there
// (an EtherType other than IPv4, IPv6, ARP or a VLAN tag: LLDP, STP, ...),
// so that the host's own daemons still see it.
//
// Rebuild with dataplane/bpf/build.sh; .ci/run rebuilds it and checks the
// object committed beside this file is what this source gives.

#include <linux/bpf.h>
#include <linux/if_ether.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

/* Receive queues a port may have (the xsks map's size). */
#define MAX_QUEUES 256

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

/* What was left to the kernel, and why (per CPU; the router adds them up). */
enum {
	/* Not a frame the routed port's router handles. */
	PASS_NOT_ROUTERS = 0,
	/* No socket on the frame's receive queue. */
	PASS_NO_SOCKET = 1,
	COUNTS = 2,
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, COUNTS);
	__type(key, __u32);
	__type(value, __u64);
} passed SEC(".maps");

/* Set by the router before loading: non-zero on a routed port (one with
 * addresses), where only IPv4, IPv6, ARP and VLAN-tagged frames are its. */
volatile const __u32 routed = 0;

static __always_inline void count(__u32 why)
{
	__u64 *c = bpf_map_lookup_elem(&passed, &why);

	if (c)
		*c += 1;
}

static __always_inline int routers_frame(const struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;

	if (!routed)
		return 1;
	/* A runt is the router's too: it counts it as malformed. */
	if ((void *)(eth + 1) > end)
		return 1;
	switch (bpf_ntohs(eth->h_proto)) {
	case ETH_P_IP:
	case ETH_P_IPV6:
	case ETH_P_ARP:
	case ETH_P_8021Q:
	case ETH_P_8021AD:
	case 0x9100: /* pre-standard QinQ */
		return 1;
	}
	return 0;
}

SEC("xdp")
int bloomplane_xdp(struct xdp_md *ctx)
{
	long act;

	if (!routers_frame(ctx)) {
		count(PASS_NOT_ROUTERS);
		return XDP_PASS;
	}
	act = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
	if (act != XDP_REDIRECT)
		count(PASS_NO_SOCKET);
	return act;
}

char LICENSE[] SEC("license") = "Dual MIT/GPL";
