import { describe, expect, it } from 'vitest';
import { describeServer } from '../../src/db/describe.js';

describe('the server a connection string names', () => {
  it.each([
    ['postgres://u:secret@db.internal:6432/plants', 'db.internal:6432/plants'],
    ['postgres://db.internal/plants', 'db.internal:5432/plants'],
    ['postgres:///plants?host=/var/run/postgresql', '/var/run/postgresql:5432/plants'],
    ['postgres://%2Fvar%2Frun%2Fpostgresql/plants', '/var/run/postgresql:5432/plants'],
    ['postgres://ignored:1/plants?host=other&port=7000', 'other:7000/plants'],
  ])('%s is %s, with no credentials', (url, address) => {
    const described = describeServer(url);
    expect(described).toBe(`the PostgreSQL server at ${address}`);
    expect(described).not.toContain('secret');
  });
});
