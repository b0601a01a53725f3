import t from 'tap';
import { isDuration, parseDuration } from '../../src/config/duration.js';

t.test('parses single units and combinations to milliseconds', async (t) => {
  const cases: Array<[string, number]> = [
    ['0s', 0],
    ['0ms', 0],
    ['250ms', 250],
    ['15s', 15_000],
    ['10m', 600_000],
    ['24h', 86_400_000],
    ['720h', 2_592_000_000],
    ['2d', 172_800_000],
    ['1h30m', 5_400_000],
    ['1m5ms', 60_005],
    ['1.5h', 5_400_000],
    ['2h0m3s', 7_203_000],
  ];
  for (const [text, ms] of cases) t.equal(parseDuration(text), ms, text);
});

t.test('rejects anything else with a message naming the input', async (t) => {
  for (const bad of ['', '15', '15x', '-5s', 's', '1h 30m', '1.s', 'ten seconds', '5sm', '1H']) {
    t.throws(() => parseDuration(bad), { message: new RegExp(`invalid duration ${JSON.stringify(JSON.stringify(bad)).slice(1, -1)}`) }, bad);
    t.equal(isDuration(bad), false, bad);
  }
  t.throws(() => parseDuration(15 as unknown as string), TypeError);
  t.equal(isDuration('5m'), true);
});
