import { expect, it } from 'vitest';
import { addressKey, resolveClientAddress, UNKNOWN_ADDRESS } from '../src/client-address.js';

const withForwarded = (value?: string) =>
  new Request('http://test.local/mcp', { headers: value === undefined ? {} : { 'x-forwarded-for': value } });

it('addressKey: IPv4 as it is (also IPv4-mapped), IPv6 by its /64 (any spelling), anything else lower-cased', () => {
  expect(addressKey('192.0.2.1')).toBe('192.0.2.1');
  expect(addressKey('::ffff:192.0.2.1')).toBe('192.0.2.1');
  expect(addressKey('0:0:0:0:0:FFFF:192.0.2.1')).toBe('192.0.2.1');
  expect(addressKey('2001:db8:1:2:3:4:5:6')).toBe('2001:db8:1:2::/64');
  expect(addressKey('2001:0DB8:0001:0002::9')).toBe('2001:db8:1:2::/64');
  expect(addressKey('[2001:db8:1:2::1]')).toBe('2001:db8:1:2::/64');
  expect(addressKey('fe80::1%eth0')).toBe('fe80:0:0:0::/64');
  expect(addressKey('::1')).toBe('0:0:0:0::/64');
  expect(addressKey('Unknown')).toBe('unknown');
});

it('resolveClientAddress: the peer unless trustProxy; then the entry that many hops from the right (the leftmost when fewer)', () => {
  const chain = '203.0.113.5, 198.51.100.7, 10.0.0.2';
  expect(resolveClientAddress(withForwarded(chain), '10.0.0.1', 0)).toBe('10.0.0.1');
  expect(resolveClientAddress(withForwarded(chain), '10.0.0.1', 1)).toBe('10.0.0.2');
  expect(resolveClientAddress(withForwarded(chain), '10.0.0.1', 2)).toBe('198.51.100.7');
  expect(resolveClientAddress(withForwarded(chain), '10.0.0.1', 3)).toBe('203.0.113.5');
  expect(resolveClientAddress(withForwarded(chain), '10.0.0.1', 9)).toBe('203.0.113.5');
  // No header, an empty entry, an oversized header or entry: the peer's address.
  expect(resolveClientAddress(withForwarded(), '10.0.0.1', 1)).toBe('10.0.0.1');
  expect(resolveClientAddress(withForwarded('1.2.3.4, '), '10.0.0.1', 1)).toBe('10.0.0.1');
  expect(resolveClientAddress(withForwarded(`1.2.3.4,${' '.repeat(2_100)}5.6.7.8`), '10.0.0.1', 1)).toBe('10.0.0.1');
  expect(resolveClientAddress(withForwarded('x'.repeat(65)), '10.0.0.1', 1)).toBe('10.0.0.1');
  // Without a peer address (a host that did not pass one): one unknown address, whatever the header says.
  expect(resolveClientAddress(withForwarded(chain), undefined, 1)).toBe(UNKNOWN_ADDRESS);
  expect(resolveClientAddress(withForwarded(chain), '', 0)).toBe(UNKNOWN_ADDRESS);
});
