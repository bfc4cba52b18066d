import dns from "node:dns";
import http from "node:http";
import https from "node:https";
import net from "node:net";
import type { LookupFunction } from "node:net";
import type { Environment } from "@svc/contract";

/**
 * Which addresses an outbound webhook may reach (SSRF). By default no endpoint,
 * in any environment, may make the service call an address that is not a public
 * unicast one: loopback, private, link-local (cloud metadata at 169.254.169.254),
 * unique-local, CGNAT, multicast, broadcast, reserved, documentation, benchmarking,
 * the IPv6 transition forms that embed an IPv4 address (IPv4-mapped, NAT64, 6to4,
 * Teredo), and every other block of IANA's IPv4 and IPv6 special-purpose address
 * registries. The operator may allow them (`WEBHOOK_PRIVATE_ADDRESSES`): `test`
 * for the `test` environment's endpoints (a developer receiving webhooks on their
 * own machine), `all` for every endpoint; `none` is the default.
 */
export type PrivateAddressPolicy = "test" | "all" | "none";

/** A refused block: its first address, prefix length and what it is (the registries' names). */
type Block = readonly [address: string, prefix: number, name: string];

/**
 * IPv4: IANA's IPv4 Special-Purpose Address Registry (every entry, the globally
 * reachable anycast ones too: no webhook receiver lives there), plus multicast from
 * the IPv4 address space registry.
 */
export const REFUSED_IPV4: readonly Block[] = [
  ["0.0.0.0", 8, "this network (RFC 791)"],
  ["10.0.0.0", 8, "private use (RFC 1918)"],
  ["100.64.0.0", 10, "shared address space, CGNAT (RFC 6598)"],
  ["127.0.0.0", 8, "loopback (RFC 1122)"],
  ["169.254.0.0", 16, "link local, cloud metadata (RFC 3927)"],
  ["172.16.0.0", 12, "private use (RFC 1918)"],
  ["192.0.0.0", 24, "IETF protocol assignments, DS-Lite, NAT64 discovery, PCP and TURN anycast (RFC 6890)"],
  ["192.0.2.0", 24, "documentation TEST-NET-1 (RFC 5737)"],
  ["192.31.196.0", 24, "AS112-v4 (RFC 7535)"],
  ["192.52.193.0", 24, "AMT (RFC 7450)"],
  ["192.88.99.0", 24, "deprecated 6to4 relay anycast (RFC 7526)"],
  ["192.168.0.0", 16, "private use (RFC 1918)"],
  ["192.175.48.0", 24, "direct delegation AS112 service (RFC 7534)"],
  ["198.18.0.0", 15, "benchmarking (RFC 2544)"],
  ["198.51.100.0", 24, "documentation TEST-NET-2 (RFC 5737)"],
  ["203.0.113.0", 24, "documentation TEST-NET-3 (RFC 5737)"],
  ["224.0.0.0", 4, "multicast (RFC 5771)"],
  ["240.0.0.0", 4, "reserved (RFC 1112)"],
  ["255.255.255.255", 32, "limited broadcast (RFC 919)"],
];

/**
 * IPv6: only global unicast (2000::/3) is ever reached, so everything outside it is
 * refused (the unspecified and loopback addresses, IPv4-mapped ::ffff:0:0/96, the
 * deprecated IPv4-compatible ::/96, NAT64 64:ff9b::/96 and 64:ff9b:1::/48, discard-only
 * 100::/64 and the dummy prefix 100:0:0:1::/64, SRv6 SIDs 5f00::/16, unique local
 * fc00::/7, link local fe80::/10, deprecated site local fec0::/10, multicast ff00::/8),
 * and inside it the blocks of IANA's IPv6 Special-Purpose Address Registry.
 */
export const REFUSED_IPV6: readonly Block[] = [
  ["::", 3, "outside global unicast: unspecified, loopback, IPv4-mapped and -compatible, NAT64, discard, dummy (RFC 4291, 6052, 8215, 6666, 9780)"],
  ["4000::", 2, "outside global unicast: SRv6 SIDs 5f00::/16 and reserved (RFC 9602)"],
  ["8000::", 1, "outside global unicast: unique local fc00::/7, link local fe80::/10, site local fec0::/10, multicast ff00::/8 (RFC 4193, 4291, 3879)"],
  ["2001::", 23, "IETF protocol assignments: Teredo 2001::/32, benchmarking, AMT, AS112, ORCHID, DRIP, PCP and DNS-SD anycast (RFC 2928)"],
  ["2001:db8::", 32, "documentation (RFC 3849)"],
  ["2002::", 16, "6to4 (RFC 3056)"],
  ["2620:4f:8000::", 48, "direct delegation AS112 service (RFC 7534)"],
  ["3fff::", 20, "documentation (RFC 9637)"],
];

// Two lists: Node's BlockList also matches an IPv4 address against IPv6 rules (as
// ::ffff:a.b.c.d), and every IPv4-mapped address is refused on the IPv6 side.
const V4 = new net.BlockList();
for (const [address, prefix] of REFUSED_IPV4) V4.addSubnet(address, prefix, "ipv4");
const V6 = new net.BlockList();
for (const [address, prefix] of REFUSED_IPV6) V6.addSubnet(address, prefix, "ipv6");

/** True for any address a webhook must not reach by default (not a public unicast address); false for a name. */
export function isPrivateAddress(address: string): boolean {
  const bare = address.replace(/^\[|\]$/g, "");
  const family = net.isIP(bare);
  if (family === 4) return V4.check(bare, "ipv4");
  if (family === 6) return V6.check(bare, "ipv6");
  return false;
}

export function allowsPrivate(policy: PrivateAddressPolicy, environment: Environment): boolean {
  return policy === "all" || (policy === "test" && environment === "test");
}

/** A refusal of the URL's host when it is a literal private address (no lookup happens for those). */
export function refuseLiteral(host: string): string | null {
  const bare = host.replace(/^\[|\]$/g, "");
  return net.isIP(bare) && isPrivateAddress(bare) ? `refused: ${bare} is a private or special-purpose address (webhooks may only reach public ones)` : null;
}

/**
 * A DNS lookup that fails when any answer is private, so a public name pointed at an
 * internal address is refused too. The connection is made to the address checked here
 * (no second lookup the answer could change in between). The refusal does not say which
 * address the name resolved to: the delivery log must not map the service's network.
 */
export const publicOnlyLookup: LookupFunction = (hostname, options, callback) => {
  dns.lookup(hostname, { ...options, all: true }, (err, addresses) => {
    if (err) return (callback as (e: Error) => void)(err);
    const list = addresses as dns.LookupAddress[];
    if (list.length === 0 || list.some((a) => isPrivateAddress(a.address))) {
      return (callback as (e: Error) => void)(Object.assign(new Error(`refused: ${hostname} resolves to a private or special-purpose address (webhooks may only reach public ones)`), { code: "EPRIVATE" }));
    }
    if ((options as dns.LookupOptions).all) return (callback as (e: null, a: dns.LookupAddress[]) => void)(null, list);
    (callback as (e: null, a: string, f: number) => void)(null, list[0].address, list[0].family);
  });
};

/**
 * The agents of guarded attempts: every socket they open went through the guarded
 * lookup, and they never share a kept-alive socket with an attempt that may reach
 * private addresses (the global agents keep sockets alive and would hand one opened
 * for a `test` endpoint to a guarded attempt to the same host, with no lookup).
 */
export const guardedAgents = {
  http: new http.Agent({ keepAlive: true, lookup: publicOnlyLookup }),
  https: new https.Agent({ keepAlive: true, lookup: publicOnlyLookup }),
};
/** The agents of attempts the operator lets reach private addresses. */
export const openAgents = {
  http: new http.Agent({ keepAlive: true }),
  https: new https.Agent({ keepAlive: true }),
};
