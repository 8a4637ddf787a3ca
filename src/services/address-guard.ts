/**
 * Which IP addresses a photo URL may lead the service to.
 *
 * Fetching a client-supplied URL from inside the network is a classic
 * server-side request forgery: the guard refuses loopback, private,
 * link-local (cloud metadata lives at 169.254.169.254), carrier-grade NAT,
 * multicast, documentation and reserved ranges. IPv6 forms that embed an IPv4
 * address and may reach it through a translator (NAT64, 6to4) are refused as
 * a whole rather than decoded; IPv4-mapped IPv6 is checked as the IPv4
 * address it maps (BlockList does that).
 */
import { BlockList, isIP } from 'node:net';

const blocked = new BlockList();
const v4: Array<[string, number]> = [
  ['0.0.0.0', 8], // "this" network
  ['10.0.0.0', 8],
  ['100.64.0.0', 10], // carrier-grade NAT
  ['127.0.0.0', 8],
  ['169.254.0.0', 16], // link-local, cloud metadata
  ['172.16.0.0', 12],
  ['192.0.0.0', 24], // IETF protocol assignments
  ['192.0.2.0', 24], // TEST-NET-1
  ['192.88.99.0', 24], // 6to4 relay anycast
  ['192.168.0.0', 16],
  ['198.18.0.0', 15], // benchmarking
  ['198.51.100.0', 24], // TEST-NET-2
  ['203.0.113.0', 24], // TEST-NET-3
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
];
const v6: Array<[string, number]> = [
  ['::', 96], // unspecified, loopback and IPv4-compatible ::a.b.c.d (also written ::7f00:1)
  ['64:ff9b::', 96], // NAT64 well-known prefix
  ['64:ff9b:1::', 48], // local-use NAT64
  ['100::', 64], // discard-only
  ['2001::', 32], // Teredo
  ['2001:db8::', 32], // documentation
  ['2002::', 16], // 6to4
  ['fc00::', 7], // unique local
  ['fe80::', 10], // link-local
  ['fec0::', 10], // deprecated site-local
  ['ff00::', 8], // multicast
];
for (const [net, prefix] of v4) blocked.addSubnet(net, prefix, 'ipv4');
for (const [net, prefix] of v6) blocked.addSubnet(net, prefix, 'ipv6');

/** True for an address on the public internet; false for anything reserved, private or not an IP at all. */
export function isPublicAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return !blocked.check(address, 'ipv4');
  if (family === 6) {
    return !blocked.check(address, 'ipv6');
  }
  return false;
}
