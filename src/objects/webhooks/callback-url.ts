/**
 * Which callback URLs a hook may deliver to. Deliveries are server-side requests to a URL a client
 * chose, so anything that could reach the operator's own network is refused: private, loopback,
 * link-local, CGNAT, multicast and reserved addresses, and internal-looking host names. Loopback over
 * http is allowed only in dev (ALLOW_LOOPBACK_CALLBACKS), for local receivers.
 *
 * The WHATWG URL parser already normalises IPv4 in every spelling (2130706433, 0x7f.1, 0177.0.0.1, 127.1
 * all become 127.0.0.1) and IPv6 to its compressed form, so only canonical literals need checking here.
 * Host names are not resolved (Workers have no DNS API); a public name pointing at a private address is
 * left to the platform's egress rules.
 */

export interface CallbackUrlPolicy {
  /** Dev: allow http(s) to 127.0.0.0/8, ::1 and localhost. */
  allowLoopback: boolean;
  /**
   * The service's own host (`host[:port]` of the URL a request came in on), when known: a callback there
   * would deliver into the service itself. Paths under /v1/hooks/ are refused on every host.
   */
  selfHost?: string;
}

/** An inbound-webhook path, however spelled (`//v1//Hooks/x`, `/v1/%68ooks/x`): a delivery there could loop. */
function isHookPath(pathname: string): boolean {
  let path = pathname;
  try {
    path = decodeURIComponent(pathname);
  } catch {
    // Not decodable: judged as written.
  }
  return /\/v1\/+hooks(\/|$)/i.test(path.replace(/\/+/g, '/'));
}

/** A host name without its trailing dots (`example.com..` is `example.com` to a resolver). */
function withoutTrailingDots(host: string): string {
  return host.replace(/\.+$/, '');
}

export type CallbackUrlCheck = { ok: true; url: URL } | { ok: false; reason: string };

/** IPv4 ranges no callback may target (besides loopback, handled apart). [base, prefix length]. */
const BLOCKED_V4: [string, number, string][] = [
  ['0.0.0.0', 8, 'unspecified/"this network"'],
  ['10.0.0.0', 8, 'private'],
  ['100.64.0.0', 10, 'shared (CGNAT)'],
  ['169.254.0.0', 16, 'link-local'],
  ['172.16.0.0', 12, 'private'],
  ['192.0.0.0', 24, 'IETF protocol assignments'],
  ['192.0.2.0', 24, 'documentation'],
  ['192.88.99.0', 24, '6to4 relay'],
  ['192.168.0.0', 16, 'private'],
  ['198.18.0.0', 15, 'benchmarking'],
  ['198.51.100.0', 24, 'documentation'],
  ['203.0.113.0', 24, 'documentation'],
  ['224.0.0.0', 4, 'multicast'],
  ['240.0.0.0', 4, 'reserved/broadcast'],
];

const INTERNAL_SUFFIXES = ['.local', '.internal', '.intranet', '.lan', '.home.arpa', '.localdomain', '.corp'];

export function checkCallbackUrl(raw: unknown, policy: CallbackUrlPolicy): CallbackUrlCheck {
  if (typeof raw !== 'string' || raw.length === 0) return refuse('callback_url must be a non-empty string');
  if (raw.length > 2048) return refuse('callback_url is longer than 2048 characters');
  let url: URL;
  try {
    url = new URL(raw);
  } catch {
    return refuse('callback_url is not a valid absolute URL');
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') return refuse('callback_url must be an https URL');
  if (url.username || url.password) return refuse('callback_url must not carry credentials');

  if (isHookPath(url.pathname))
    return refuse('callback_url must not be an inbound webhook path (/v1/hooks/): a delivery there could loop');
  const host = withoutTrailingDots(url.hostname.toLowerCase());
  if (policy.selfHost !== undefined && sameHost(url, host, policy.selfHost))
    return refuse("callback_url must not point at this service's own host");
  const loopback = isLoopbackHost(host);
  if (loopback) {
    return policy.allowLoopback ? { ok: true, url } : refuse('callback_url must not point at a loopback address');
  }
  if (url.protocol !== 'https:')
    return refuse('callback_url must be an https URL (http is allowed for loopback in dev only)');

  if (host.startsWith('[')) {
    const groups = parseIpv6(host.slice(1, -1));
    if (!groups) return refuse('callback_url has an unparseable IPv6 address');
    const why = blockedV6(groups);
    return why ? refuse(`callback_url points at a ${why} address`) : { ok: true, url };
  }
  const v4 = parseIpv4(host);
  if (v4 !== null) {
    const why = blockedV4(v4);
    return why ? refuse(`callback_url points at a ${why} address`) : { ok: true, url };
  }
  if (!host.includes('.') || INTERNAL_SUFFIXES.some((s) => host.endsWith(s))) {
    return refuse('callback_url must name a public host');
  }
  return { ok: true, url };
}

/** Whether `url` (its host `host`, dots stripped) is `selfHost` (`host[:port]`), default ports included. */
function sameHost(url: URL, host: string, selfHost: string): boolean {
  let self: URL;
  try {
    self = new URL(`${url.protocol}//${selfHost}`);
  } catch {
    return false;
  }
  const port = (u: URL): string => u.port || (u.protocol === 'https:' ? '443' : '80');
  return withoutTrailingDots(self.hostname.toLowerCase()) === host && port(self) === port(url);
}

/** 127.0.0.0/8, ::1 (also IPv4-mapped 127/8) and localhost, *.localhost. */
export function isLoopbackHost(raw: string): boolean {
  const host = withoutTrailingDots(raw);
  if (host === 'localhost' || host.endsWith('.localhost')) return true;
  const v4 = parseIpv4(host);
  if (v4 !== null) return v4 >>> 24 === 127;
  if (host.startsWith('[')) {
    const g = parseIpv6(host.slice(1, -1));
    if (!g) return false;
    if (g.slice(0, 7).every((x) => x === 0) && g[7] === 1) return true;
    const mapped = embeddedV4(g);
    return mapped !== null && mapped >>> 24 === 127;
  }
  return false;
}

function refuse(reason: string): CallbackUrlCheck {
  return { ok: false, reason };
}

/** A dotted-quad (as the URL parser leaves it) as an unsigned 32-bit number, or null. */
export function parseIpv4(host: string): number | null {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(host);
  if (!m) return null;
  const parts = m.slice(1).map(Number);
  if (parts.some((p) => p > 255)) return null;
  return ((parts[0] << 24) | (parts[1] << 16) | (parts[2] << 8) | parts[3]) >>> 0;
}

function blockedV4(ip: number): string | null {
  if (ip === 0xffffffff) return 'broadcast';
  if (ip >>> 24 === 127) return 'loopback';
  for (const [base, bits, why] of BLOCKED_V4) {
    const mask = bits === 0 ? 0 : (~0 << (32 - bits)) >>> 0;
    if ((ip & mask) >>> 0 === (parseIpv4(base)! & mask) >>> 0) return why;
  }
  return null;
}

/** Eight 16-bit groups of an IPv6 literal (`::` and a trailing dotted quad allowed), or null. */
export function parseIpv6(text: string): number[] | null {
  if (text.includes('%')) return null; // zone ids name local interfaces
  // A trailing dotted quad (::ffff:1.2.3.4) is two groups written differently.
  const quad = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  let body = text;
  if (quad) {
    const v4 = parseIpv4(quad[1]);
    if (v4 === null) return null;
    body = `${text.slice(0, quad.index)}${(v4 >>> 16).toString(16)}:${(v4 & 0xffff).toString(16)}`;
  }
  const halves = body.split('::');
  if (halves.length > 2) return null;
  const parse = (s: string): number[] | null => {
    if (s === '') return [];
    const out: number[] = [];
    for (const g of s.split(':')) {
      if (!/^[0-9a-f]{1,4}$/i.test(g)) return null;
      out.push(parseInt(g, 16));
    }
    return out;
  };
  const head = parse(halves[0]);
  const rest = halves.length === 2 ? parse(halves[1]) : [];
  if (!head || !rest) return null;
  const given = head.length + rest.length;
  if (halves.length === 2) {
    if (given > 7) return null;
    return [...head, ...new Array<number>(8 - given).fill(0), ...rest];
  }
  return given === 8 ? head : null;
}

/**
 * The IPv4 address an IPv6 one carries, or null: mapped ::ffff:0:0/96, translated ::ffff:0:0:0/96
 * (`::ffff:0:7f00:1` is 127.0.0.1, RFC 2765), compatible ::/96, well-known NAT64 64:ff9b::/96.
 */
function embeddedV4(g: number[]): number | null {
  const low = ((g[6] << 16) | g[7]) >>> 0;
  const zeros = (n: number): boolean => g.slice(0, n).every((x) => x === 0);
  if (zeros(5) && g[5] === 0xffff) return low;
  if (zeros(4) && g[4] === 0xffff && g[5] === 0) return low;
  if (zeros(6) && low > 1) return low;
  if (g[0] === 0x64 && g[1] === 0xff9b && g.slice(2, 6).every((x) => x === 0)) return low;
  return null;
}

function blockedV6(g: number[]): string | null {
  if (g.every((x) => x === 0)) return 'unspecified';
  if (g.slice(0, 7).every((x) => x === 0) && g[7] === 1) return 'loopback';
  const v4 = embeddedV4(g);
  if (v4 !== null) return blockedV4(v4) ?? null;
  if ((g[0] & 0xfe00) === 0xfc00) return 'unique-local (fc00::/7)';
  if ((g[0] & 0xffc0) === 0xfe80) return 'link-local (fe80::/10)';
  if ((g[0] & 0xffc0) === 0xfec0) return 'site-local (fec0::/10)';
  if ((g[0] & 0xff00) === 0xff00) return 'multicast';
  if (g[0] === 0x2001 && g[1] === 0x0db8) return 'documentation';
  // Local-use NAT64 (RFC 8215): translated by the operator's own gateway to any IPv4, its network's too.
  if (g[0] === 0x64 && g[1] === 0xff9b && g[2] === 0x0001) return 'local-use NAT64 (64:ff9b:1::/48)';
  if (g[0] === 0x0100 && g.slice(1, 4).every((x) => x === 0)) return 'discard-only';
  // 6to4 carries an IPv4 address in bits 16-48.
  if (g[0] === 0x2002) return blockedV4(((g[1] << 16) | g[2]) >>> 0);
  return null;
}
