// `npm run <script> -- --help` for every script: its usage on stdout and exit 0, before anything else runs
// (no model built, no file written, no network). Each script calls answerHelp first with its own usage.
/** True where argv asks for help (`--help` or `-h`). */
export const asksHelp = (argv: readonly string[]): boolean => argv.includes('--help') || argv.includes('-h');

/** Usage text as printed: starts `Usage: `, whatever case the script's own message had. */
export const usageText = (usage: string): string => `${usage.trim().replace(/^usage:\s*/i, 'Usage: ')}\n`;

/** Prints `usage` and exits 0 where argv asks for help; otherwise returns. */
export function answerHelp(usage: string, argv: readonly string[] = process.argv.slice(2)): void {
  if (!asksHelp(argv)) return;
  process.stdout.write(usageText(usage));
  process.exit(0);
}
