import t from 'tap';

import { doiToUrl, InvalidDoiError, normalizeDoi } from '../../../src/providers/fetch/doi.js';

t.test('accepted DOI forms resolve to the same URL', async (t) => {
  for (const input of [
    '10.1000/xyz123',
    '  10.1000/xyz123  ',
    'doi:10.1000/xyz123',
    'DOI: 10.1000/xyz123',
    'https://doi.org/10.1000/xyz123',
    'http://dx.doi.org/10.1000/xyz123',
    'HTTPS://DOI.ORG/10.1000/xyz123',
  ]) {
    t.equal(doiToUrl(input), 'https://doi.org/10.1000/xyz123', JSON.stringify(input));
  }
});

t.test('suffix characters are kept or escaped so the URL round-trips', async (t) => {
  t.equal(
    doiToUrl('10.1002/(SICI)1097-4636(199706)35:4<497::AID-JBM10>3.0.CO;2-F'),
    'https://doi.org/10.1002/(SICI)1097-4636(199706)35:4%3C497::AID-JBM10%3E3.0.CO;2-F',
  );
  t.equal(doiToUrl('10.1000/a#b?c_d%'), 'https://doi.org/10.1000/a%23b%3Fc_d%25');
  t.equal(doiToUrl('10.1000/../etc'), 'https://doi.org/10.1000/../etc', 'dot segments are not resolved away');
  t.equal(normalizeDoi('https://doi.org/10.1002/%28SICI%291097'), '10.1002/(SICI)1097', 'URL escapes are decoded');
  t.equal(doiToUrl('10.1000.10/abc'), 'https://doi.org/10.1000.10/abc', 'registrant sub-codes');
  t.equal(doiToUrl('10.1234/ÄÖÜ'), 'https://doi.org/10.1234/%C3%84%C3%96%C3%9C');
});

t.test('the resolver base is configurable', async (t) => {
  t.equal(doiToUrl('10.1000/x', 'http://127.0.0.1:8080/resolve'), 'http://127.0.0.1:8080/resolve/10.1000/x');
  t.equal(doiToUrl('doi:10.1000/x', 'https://resolver.example/doi/'), 'https://resolver.example/doi/10.1000/x');
  t.throws(() => doiToUrl('10.1000/x', 'not a url'), TypeError);
});

t.test('invalid DOIs give a clear error', async (t) => {
  for (const input of [
    '',
    '   ',
    'doi:',
    '10.1000',
    '10.1000/',
    '10.12/short-registrant',
    '11.1000/wrong-directory',
    '10.abcd/letters',
    '10.1000/has space',
    '10.1000/tab\there',
    'https://example.com/10.1000/x',
    'https://doi.org/10.1000/%E0%A4%A',
    'prefix 10.1000/x',
  ]) {
    const error = t.throws(() => doiToUrl(input), InvalidDoiError, JSON.stringify(input));
    t.match(error, { message: /invalid DOI/, permanent: true }, JSON.stringify(input));
  }
  // A value that is not a string at all (untyped JSON input) is rejected the same way.
  t.throws(() => normalizeDoi(42 as unknown as string), InvalidDoiError);
});
