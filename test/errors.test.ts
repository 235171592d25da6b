import { describe, expect, it } from 'vitest';
import { ConfigError, errorMessage } from '../src/core/errors.js';

describe('errorMessage (what logs and readiness show of a failure)', () => {
  it('names every address of a refused connection (an AggregateError has no message of its own)', () => {
    const refused = new AggregateError(
      [new Error('connect ECONNREFUSED ::1:5672'), new Error('connect ECONNREFUSED 127.0.0.1:5672')],
      '',
    );
    expect(errorMessage(refused)).toBe('connect ECONNREFUSED ::1:5672; connect ECONNREFUSED 127.0.0.1:5672');
  });

  it('falls back to the error name when the message is empty, and to String() for non-errors', () => {
    const anonymous = new Error('');
    anonymous.name = 'AbortError';
    expect(errorMessage(anonymous)).toBe('AbortError');
    expect(errorMessage(new ConfigError('bad option'))).toBe('bad option');
    expect(errorMessage('plain text')).toBe('plain text');
    expect(errorMessage(42)).toBe('42');
  });

  it('never throws, whatever was thrown: a handler may throw a value with no string form', () => {
    const throwingMessage = new Error('x');
    Object.defineProperty(throwingMessage, 'message', {
      get() {
        throw new Error('no message for you');
      },
    });
    const odd: [unknown, string][] = [
      [Object.create(null), 'unprintable thrown value [object Object]'],
      [
        {
          toString: () => {
            throw new Error('no');
          },
        },
        'unprintable thrown value [object Object]',
      ],
      [Object.assign(new Error('x'), { message: 42 }), 'Error'],
      [throwingMessage, 'unprintable thrown value [object Error]'],
      [Symbol('s'), 'Symbol(s)'],
      [undefined, 'undefined'],
      [null, 'null'],
      [new AggregateError([Object.create(null)], ''), 'unprintable thrown value [object Object]'],
    ];
    for (const [value, text] of odd) expect(errorMessage(value)).toBe(text);
  });
});
