/**
 * A hold on provisioned-rate initialization: while held, every such volume's progress stands
 * still, so a test can have a volume still initializing when the code under test looks,
 * however slow the machine is, and let it go on when it chooses. Progress counts only the time
 * outside holds.
 */
export class InitializationHold {
  /** Holds that ended, as [from, to] in ms since the epoch. */
  private readonly past: [number, number][] = [];
  private since: number | undefined;

  get held(): boolean {
    return this.since !== undefined;
  }

  /** Stops progress from `now` (a second hold while held changes nothing). */
  hold(now: number): void {
    this.since ??= now;
  }

  /** Lets progress go on from `now` (nothing when not held). */
  release(now: number): void {
    if (this.since === undefined) return;
    this.past.push([this.since, now]);
    this.since = undefined;
  }

  /** How many ms of [from, now] were held. */
  heldMs(from: number, now: number): number {
    const spans = this.since === undefined ? this.past : [...this.past, [this.since, now] as [number, number]];
    return spans.reduce((sum, [a, b]) => sum + Math.max(0, Math.min(b, now) - Math.max(a, from)), 0);
  }
}
