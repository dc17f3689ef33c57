import { describe, expect, it } from 'vitest';
import { createReadRouting, type ServerReport } from '../../src/db/read-routing.js';

const MAX_LAG_MS = 1000;

/** Routing over `count` replicas on a clock the test moves, with what it logged. */
function routing(count = 2) {
  let now = 0;
  const rotation: string[] = [];
  const routes = createReadRouting(count, {
    maxLagMs: MAX_LAG_MS,
    now: () => now,
    onRotation: (index, inRotation, _reason, first) =>
      rotation.push(`${index} ${first ? 'first ' : ''}${inRotation ? 'in' : 'out'}`),
  });
  return { routes, rotation, advance: (ms: number) => (now += ms) };
}

/** A route to replica `index`, as chosen on a server run `run` on timeline `timeline`. */
const onReplica = (index: number, run = 'standby start', timeline = 1) => ({
  replica: index,
  run,
  timeline,
});

const primary = (lsn: string, timeline = 1): ServerReport => ({
  standby: false,
  lsn,
  started: 'primary start',
  walFile: `${timeline.toString(16).toUpperCase().padStart(8, '0')}0000000000000001`,
});
const standby = (lsn: string, started = 'standby start', timeline = 1): ServerReport => ({
  standby: true,
  lsn,
  started,
  walFile: null,
  timeline,
});

describe('read routing', () => {
  it('sends a read to the primary while no replica has answered as a standby', () => {
    const { routes, rotation } = routing();
    routes.observePrimary(primary('0/100'));
    routes.observeReplica(1, primary('0/100'));
    expect(rotation).toStrictEqual(['1 first out']);
    expect(routes.choose(undefined)).toStrictEqual({ primary: 'none' });
    expect(routes.choose({ timeline: 1, lsn: 0x100n })).toStrictEqual({ primary: 'none' });
  });

  it('sends a read with a token to a replica that has replayed it, else to the primary', () => {
    const { routes } = routing();
    routes.observePrimary(primary('0/300'));
    routes.observeReplica(0, standby('0/200'));
    routes.observeReplica(1, standby('0/300'));
    expect(routes.choose({ timeline: 1, lsn: 0x300n })).toStrictEqual(onReplica(1));
    expect(routes.choose({ timeline: 1, lsn: 0x301n })).toStrictEqual({ primary: 'behind' });
  });

  it('sends a token of another timeline to the primary', () => {
    const { routes } = routing();
    routes.observePrimary(primary('0/300', 2));
    routes.observeReplica(0, standby('0/300', 'start', 2));
    expect(routes.choose({ timeline: 1, lsn: 0x100n })).toStrictEqual({ primary: 'timeline' });
    expect(routes.choose({ timeline: 2, lsn: 0x100n })).toStrictEqual(onReplica(0, 'start', 2));
  });

  it('passes over a replica still on an older timeline, even when its position is past the token', () => {
    const { routes } = routing(1);
    routes.observePrimary(primary('0/300', 2));
    routes.observeReplica(0, standby('0/900', 'start', 1));
    expect(routes.choose({ timeline: 2, lsn: 0x300n })).toStrictEqual({ primary: 'timeline' });
    expect(routes.choose(undefined)).toStrictEqual({ primary: 'behind' });
  });

  it('follows a replica onto a newer timeline before the new primary answers', () => {
    const { routes } = routing(2);
    routes.observePrimary(primary('0/300', 1));
    routes.observeReplica(0, standby('0/300', 'start', 1));
    routes.observeReplica(1, standby('0/300', 'start', 1));
    // A failover: replica 1 follows the new primary on timeline 2, the old one is gone.
    routes.observeReplica(1, standby('0/380', 'start', 2));
    expect(routes.choose(undefined)).toStrictEqual(onReplica(1, 'start', 2));
    expect(routes.choose({ timeline: 2, lsn: 0x380n })).toStrictEqual(onReplica(1, 'start', 2));
    expect(routes.choose({ timeline: 1, lsn: 0x300n })).toStrictEqual({ primary: 'timeline' });
  });

  it('sends a read without a token to a replica no more than the lag behind', () => {
    const { routes, advance } = routing(1);
    routes.observePrimary(primary('0/100'));
    routes.observeReplica(0, standby('0/100'));
    advance(100);
    routes.observePrimary(primary('0/200'));
    // The primary wrote 0/200 100 ms ago: the replica, at 0/100, is within the lag.
    expect(routes.choose(undefined)).toStrictEqual(onReplica(0));
    advance(MAX_LAG_MS);
    routes.observePrimary(primary('0/200'));
    // Now 0/200 was written more than the lag ago, and the replica has not replayed it.
    expect(routes.choose(undefined)).toStrictEqual({ primary: 'behind' });
    routes.observeReplica(0, standby('0/200'));
    expect(routes.choose(undefined)).toStrictEqual(onReplica(0));
  });

  it('keeps to the last position the primary gave while it does not answer', () => {
    const { routes, advance } = routing(1);
    routes.observePrimary(primary('0/200'));
    routes.observeReplica(0, standby('0/1F0'));
    advance(60_000);
    expect(routes.choose(undefined)).toStrictEqual({ primary: 'behind' });
    routes.observeReplica(0, standby('0/200'));
    expect(routes.choose(undefined)).toStrictEqual(onReplica(0));
  });

  it('uses an answer only from the run of the server its route relied on, and only from a standby', () => {
    const { routes, rotation } = routing(1);
    routes.observePrimary(primary('0/200'));
    routes.observeReplica(0, standby('0/200', 'first run'));
    const route = routes.choose({ timeline: 1, lsn: 0x200n });
    expect(route).toStrictEqual(onReplica(0, 'first run'));
    if (!('replica' in route)) throw new Error('not routed to the replica');
    expect(routes.accept(route, standby('0/240', 'first run'))).toStrictEqual({
      timeline: 1,
      lsn: 0x240n,
    });
    // Restarted, or another server behind the same address: it may be behind what the route
    // relied on, even once its state here is that of the new run.
    routes.observeReplica(0, standby('0/100', 'second run'));
    expect(routes.accept(route, standby('0/100', 'second run'))).toBeUndefined();
    expect(routes.choose({ timeline: 1, lsn: 0x200n })).toStrictEqual({ primary: 'behind' });
    expect(routes.accept(route, primary('0/300'))).toBeUndefined();
    expect(routes.choose(undefined)).toStrictEqual({ primary: 'none' });
    expect(rotation).toStrictEqual(['0 first in', '0 out']);
  });

  it('takes a failed replica out of the rotation for a second, then until it answers again', () => {
    const { routes, rotation, advance } = routing(1);
    routes.observePrimary(primary('0/200'));
    routes.observeReplica(0, standby('0/200'));
    routes.replicaFailed(0, 'the connection failed (ECONNREFUSED)');
    expect(routes.choose(undefined)).toStrictEqual({ primary: 'none' });
    expect(routes.lagSeconds(0)).toBeUndefined();
    // Its reads may wait on a lock while it still answers the poll: not back at once.
    routes.observeReplica(0, standby('0/200'));
    expect(routes.choose(undefined)).toStrictEqual({ primary: 'none' });
    advance(1000);
    routes.observeReplica(0, standby('0/200'));
    expect(routes.choose(undefined)).toStrictEqual(onReplica(0));
    expect(rotation).toStrictEqual(['0 first in', '0 out', '0 in']);
  });

  it('takes the replicas that qualify in turn, and the preferred one first', () => {
    const { routes } = routing(3);
    routes.observePrimary(primary('0/200'));
    for (const index of [0, 1, 2]) routes.observeReplica(index, standby('0/200'));
    const chosen = Array.from({ length: 6 }, () => routes.choose(undefined));
    expect(chosen.map((route) => ('replica' in route ? route.replica : -1))).toStrictEqual([
      0, 1, 2, 0, 1, 2,
    ]);
    expect(routes.choose(undefined, 2)).toStrictEqual(onReplica(2));
  });

  it('reports a replica that keeps up under steady writes as a moment behind, not ever more', () => {
    const { routes, advance } = routing(1);
    for (let step = 1; step <= 50; step++) {
      advance(100);
      routes.observePrimary(primary(`0/${(step * 0x100).toString(16)}`));
      routes.observeReplica(0, standby(`0/${((step - 1) * 0x100).toString(16)}`));
    }
    // Missing only the write seen last, 100 ms ago.
    advance(100);
    expect(routes.lagSeconds(0)).toBe(0.1);
  });

  it('reports how long a replica has missed a write of the primary', () => {
    const { routes, advance } = routing(1);
    routes.observePrimary(primary('0/100'));
    routes.observeReplica(0, standby('0/100'));
    expect(routes.lagSeconds(0)).toBe(0);
    advance(100);
    routes.observePrimary(primary('0/200'));
    advance(2400);
    expect(routes.lagSeconds(0)).toBe(2.4);
    routes.observeReplica(0, standby('0/200'));
    expect(routes.lagSeconds(0)).toBe(0);
  });
});
