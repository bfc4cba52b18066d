import dns from "node:dns";
import net from "node:net";
import type { LookupFunction } from "node:net";

/**
 * Which addresses an outbound webhook may reach. Loopback, private, link-local
 * (cloud metadata at 169.254.169.254), unique-local, CGNAT and unspecified
 * addresses are the service's own network: a `live` endpoint must not make the
 * service call them (SSRF). A `test` endpoint may, so developers receive
 * webhooks on their own machine; `WEBHOOK_PRIVATE_ADDRESSES` changes that.
 */
export type PrivateAddressPolicy = "test" | "all" | "none";

const PRIVATE = new net.BlockList();
PRIVATE.addSubnet("0.0.0.0", 8, "ipv4");
PRIVATE.addSubnet("10.0.0.0", 8, "ipv4");
PRIVATE.addSubnet("100.64.0.0", 10, "ipv4");
PRIVATE.addSubnet("127.0.0.0", 8, "ipv4");
PRIVATE.addSubnet("169.254.0.0", 16, "ipv4");
PRIVATE.addSubnet("172.16.0.0", 12, "ipv4");
PRIVATE.addSubnet("192.168.0.0", 16, "ipv4");
PRIVATE.addSubnet("::", 128, "ipv6");
PRIVATE.addSubnet("::1", 128, "ipv6");
PRIVATE.addSubnet("fc00::", 7, "ipv6");
PRIVATE.addSubnet("fe80::", 10, "ipv6");
// NAT64 and the deprecated IPv4-compatible form embed an IPv4 address that may be internal.
PRIVATE.addSubnet("64:ff9b::", 96, "ipv6");
PRIVATE.addSubnet("::", 96, "ipv6");

export function isPrivateAddress(address: string): boolean {
  const v4mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  if (v4mapped) return PRIVATE.check(v4mapped[1], "ipv4");
  const family = net.isIP(address);
  if (family === 0) return false;
  return PRIVATE.check(address, family === 4 ? "ipv4" : "ipv6");
}

export function allowsPrivate(policy: PrivateAddressPolicy, environment: "test" | "live"): boolean {
  return policy === "all" || (policy === "test" && environment === "test");
}

/** A refusal of the URL's host when it is a literal private address (no lookup happens for those). */
export function refuseLiteral(host: string): string | null {
  const bare = host.replace(/^\[|\]$/g, "");
  return net.isIP(bare) && isPrivateAddress(bare) ? `refused: ${bare} is a private address (live endpoints may only reach public ones)` : null;
}

/** A DNS lookup that fails on private answers, so a public name pointed at an internal address is refused too. */
export const publicOnlyLookup: LookupFunction = (hostname, options, callback) => {
  dns.lookup(hostname, { ...options, all: true }, (err, addresses) => {
    if (err) return (callback as (e: Error) => void)(err);
    const list = addresses as dns.LookupAddress[];
    const bad = list.find((a) => isPrivateAddress(a.address));
    if (bad) return (callback as (e: Error) => void)(Object.assign(new Error(`${hostname} resolves to the private address ${bad.address} (live endpoints may only reach public ones)`), { code: "EPRIVATE" }));
    if ((options as dns.LookupOptions).all) return (callback as (e: null, a: dns.LookupAddress[]) => void)(null, list);
    (callback as (e: null, a: string, f: number) => void)(null, list[0].address, list[0].family);
  });
};
