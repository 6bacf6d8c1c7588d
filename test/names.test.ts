// Name checks say what to change, with an example that fits what is being named.
import { describe, it } from 'node:test';
import assert from 'node:assert/strict';
import { InvalidArgumentError, validateName } from '../src/index.js';

describe('validateName', () => {
  it('an empty election name suggests an election name, an empty lock name a lock name', () => {
    assert.throws(
      () => validateName('', 'election name'),
      (e: Error) => e instanceof InvalidArgumentError && /"elections\/scheduler"/.test(e.message) && !/locks\//.test(e.message),
    );
    assert.throws(
      () => validateName('', 'lock name'),
      (e: Error) => e instanceof InvalidArgumentError && /"locks\/orders"/.test(e.message),
    );
  });
});
