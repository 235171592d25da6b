import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type PipelineMemory,
  type PipelineSamples,
  type RunSeries,
  summarisePipeline,
} from '../bench/pipeline.js';
import { median, medianInterval, spansGoal, summariseRatios } from '../bench/stats.js';

describe('medianInterval (bench/stats.ts)', () => {
  const oneTo = (n: number) => Array.from({ length: n }, (_, i) => n - i); // unsorted on purpose

  it('takes the order statistics the binomial tails allow', () => {
    // n = 8: P(B <= 0) = 0.0039, P(B <= 1) = 0.035, so one value is left out at each end (99.2 %).
    expect(medianInterval(oneTo(8))).toEqual({ low: 2, high: 7 });
    // n = 40: P(B <= 13) = 0.0192, P(B <= 14) = 0.0403, so 14 at each end (96.2 %).
    expect(medianInterval(oneTo(40))).toEqual({ low: 15, high: 26 });
    // Too few values for 95 %: the whole range.
    expect(medianInterval(oneTo(5))).toEqual({ low: 1, high: 5 });
    expect(medianInterval(oneTo(6))).toEqual({ low: 2, high: 5 });
  });

  it('is wider at a higher confidence', () => {
    expect(medianInterval(oneTo(40), 0.99)).toEqual({ low: 13, high: 28 });
  });

  it('always holds the median, inside the range of the values', () => {
    fc.assert(
      fc.property(
        fc.array(fc.double({ noNaN: true, min: -1e6, max: 1e6 }), { minLength: 1, maxLength: 200 }),
        (xs) => {
          const { low, high } = medianInterval(xs);
          const m = median(xs);
          expect(low).toBeLessThanOrEqual(m);
          expect(high).toBeGreaterThanOrEqual(m);
          expect(low).toBeGreaterThanOrEqual(Math.min(...xs));
          expect(high).toBeLessThanOrEqual(Math.max(...xs));
        },
      ),
    );
  });

  it('has nothing to say about no values, and refuses more than it can count', () => {
    expect(medianInterval([])).toEqual({ low: Number.NaN, high: Number.NaN });
    expect(() => medianInterval(oneTo(1001))).toThrow(RangeError);
  });
});

describe('summarisePipeline (bench/pipeline.ts)', () => {
  const series = (runs: number[], cpuRuns: number[]): RunSeries => ({
    eventsPerSec: median(runs),
    usPerEvent: 1e6 / median(runs),
    runs,
    cpuUsPerEvent: median(cpuRuns),
    cpuRuns,
  });
  const memory = (rssBefore: number, peakRss: number, heapPerInFlight: number): PipelineMemory => ({
    rssBeforeBytes: rssBefore,
    heapUsedBeforeBytes: 1,
    peakRssBytes: peakRss,
    peakHeapUsedBytes: 2,
    heapUsedAfterGcBytes: 1,
    inputBytes: 10,
    envelopeBytes: 5,
    heapPerInFlightBytes: heapPerInFlight,
  });
  const part = (
    pipeline: number[],
    floor: number[],
    mem: PipelineMemory,
    floorAgain: number[] | null = null,
  ): PipelineSamples => ({
    size: '300 B',
    bodyBytes: 300,
    n: 1000,
    reps: pipeline.length,
    concurrency: 64,
    floorBatch: 64,
    pipeline: series(
      pipeline,
      pipeline.map((x) => 1e6 / x),
    ),
    untraced: null,
    floor: series(
      floor,
      floor.map((x) => 1e6 / x),
    ),
    floorClaimComplete: series(
      floor,
      floor.map((x) => 1e6 / x),
    ),
    floorAgain: floorAgain
      ? series(
          floorAgain,
          floorAgain.map((x) => 1e6 / x),
        )
      : null,
    memory: mem,
  });

  it('takes each ratio within a repetition, then pools the repetitions of every process', () => {
    // Process A ran fast and the pipeline at 0.9 of its floor; process B slow, at 0.5.
    const a = part([90, 90], [100, 100], memory(100, 150, 3000), [100, 100]);
    const b = part([40, 40], [80, 80], memory(100, 300, 5000), [80, 80]);
    const result = summarisePipeline([a, b]);
    expect(result.reps).toBe(4);
    expect(result.processes).toBe(2);
    expect(result.pipeline?.runs).toEqual([90, 90, 40, 40]);
    // Not the ratio of the pooled medians (65 ÷ 90 = 0.72), nor of runs from different processes.
    expect(result.ratios?.floor.wall).toMatchObject({ median: 0.7, min: 0.5, max: 0.9 });
    expect(result.ratios?.floor.cpu.median).toBeCloseTo(0.7, 10);
    expect(result.ratios?.floorsApart.median).toBe(1);
    expect(result.ratios?.control?.wall.median).toBe(1);
    expect(result.ratios?.untraced).toBeUndefined();
    // Memory: the process whose RSS grew most, and the median heap per event in flight.
    expect(result.memory.peakRssBytes).toBe(300);
    expect(result.memory.heapPerInFlightBytes).toBe(4000);
  });

  it('has no control when a process ran without one, and refuses parts of different sizes', () => {
    const a = part([80], [100], memory(1, 2, 3), [100]);
    const b = part([80], [100], memory(1, 2, 3));
    expect(summarisePipeline([a, b]).ratios?.control).toBeUndefined();
    expect(() => summarisePipeline([a, { ...b, size: '2 KB' }])).toThrow(/one size/);
    expect(() => summarisePipeline([])).toThrow(/at least one part/);
  });
});

describe('spansGoal (bench/stats.ts)', () => {
  it("is true only when the goal lies above the interval's low end and at most its high end", () => {
    const r = summariseRatios([0.68, 0.7, 0.72, 0.75, 0.8, 0.84, 0.9, 0.95]);
    expect(r).toMatchObject({ low: 0.7, high: 0.9 });
    expect(spansGoal(r, 0.85)).toBe(true);
    expect(spansGoal(r, 0.9)).toBe(true);
    expect(spansGoal(r, 0.7)).toBe(false); // the whole interval meets it
    expect(spansGoal(r, 0.95)).toBe(false); // the whole interval misses it
  });
});
