import t from 'tap';
import { createSignedValues } from '../../../src/auth/oauth/signedValue.js';

t.test('signed values: round trip, purpose, tampering, expiry, other secret', async (t) => {
  let clock = 1_000;
  const values = createSignedValues('a-secret-that-is-long-enough-for-hs256!!', () => clock);
  const signed = values.sign('login', { uid: 'u1' }, 100);
  t.match(values.verify('login', signed), { uid: 'u1' });
  t.equal(values.verify('csrf', signed), null, 'another purpose');
  const [body, mac] = signed.split('.');
  const forged = `${Buffer.from(JSON.stringify({ uid: 'admin', exp: 10_000 })).toString('base64url')}.${mac}`;
  t.equal(values.verify('login', forged), null, 'altered payload');
  t.equal(values.verify('login', `${body}.${mac.slice(1)}`), null, 'altered MAC');
  t.equal(values.verify('login', undefined), null);
  t.equal(values.verify('login', 'garbage'), null);
  t.equal(createSignedValues('another-secret-that-is-long-enough-too!!', () => clock).verify('login', signed), null, 'another secret');
  clock = 1_100;
  t.equal(values.verify('login', signed), null, 'expired at exp');
  t.not(values.mac('csrf', 'n'), values.mac('login', 'n'), 'MACs differ by purpose');
});
