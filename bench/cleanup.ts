/**
 * Everything the bench starts it stops, and every directory it creates it removes: on success, on an error and on
 * Ctrl-C or SIGTERM. Owners register an async undo step; `run()` performs the steps once, newest first (a cluster
 * stops before its directory goes). On a signal the steps run and the process exits with 128 + signal number; a
 * synchronous `last` step per entry (SIGKILL, rmSync) runs from the 'exit' handler if the process ends any other way.
 * After a signal, registering a new step throws: whatever was about to start (the next cluster) does not.
 */
import { rmSync } from 'node:fs';

interface Step {
  readonly name: string;
  readonly undo: () => Promise<void> | void;
  /** Synchronous fallback for an exit without a chance to await (process.exit elsewhere, an uncaught error). */
  readonly last: () => void;
}

const SIGNAL_EXIT: Readonly<Record<string, number>> = { SIGINT: 130, SIGTERM: 143 };

export class Cleanup {
  private steps: Step[] = [];
  private running: Promise<void> | undefined;
  /** Set by a signal: from then on nothing new may start (`add` throws), and the bench skips what is left. */
  interrupted = false;
  private readonly onExit = (): void => {
    for (const s of this.steps.reverse()) {
      try {
        s.last();
      } catch {
        // The process is ending: one step's failure must not keep the others from running.
      }
    }
    this.steps = [];
  };
  private readonly onSignal = (signal: NodeJS.Signals): void => {
    this.interrupted = true;
    process.stderr.write(`bench: ${signal}, stopping what it started...\n`);
    void this.run().finally(() => process.exit(SIGNAL_EXIT[signal] ?? 1));
  };

  /** Installs the exit and signal handlers (once per instance). */
  install(): this {
    process.on('exit', this.onExit);
    process.on('SIGINT', this.onSignal);
    process.on('SIGTERM', this.onSignal);
    return this;
  }

  uninstall(): void {
    process.off('exit', this.onExit);
    process.off('SIGINT', this.onSignal);
    process.off('SIGTERM', this.onSignal);
  }

  add(name: string, undo: () => Promise<void> | void, last: () => void = () => void undo()): void {
    if (this.interrupted) throw new Error(`interrupted: ${name} is not started`);
    this.steps.push({ name, undo, last });
  }

  /** A directory removed on cleanup. */
  addDirectory(path: string): void {
    const remove = (): void => rmSync(path, { recursive: true, force: true });
    this.add(`directory ${path}`, remove, remove);
  }

  /** Removes one step without running it (its owner undid it already). */
  forget(name: string): void {
    this.steps = this.steps.filter((s) => s.name !== name);
  }

  get pending(): readonly string[] {
    return this.steps.map((s) => s.name);
  }

  /** Runs every step, newest first, each once; failures are reported, not thrown, so the rest still run. */
  run(): Promise<void> {
    this.running ??= (async () => {
      while (this.steps.length > 0) {
        const step = this.steps.pop()!;
        try {
          await step.undo();
        } catch (error) {
          process.stderr.write(`bench: cleanup of ${step.name} failed: ${String(error)}\n`);
        }
      }
    })().finally(() => {
      this.running = undefined;
    });
    return this.running;
  }
}
