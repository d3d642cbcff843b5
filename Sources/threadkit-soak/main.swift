// threadkit-soak: every part of ThreadKit driven at once, from several threads, for minutes, with
// exact counts of every task: it fails on a lost or doubled task, a hang, or memory that grows.
//
//   threadkit-soak                 ten minutes, a report line each minute
//   threadkit-soak --minutes 1     what CI runs
//   threadkit-soak --seconds 20 --report-every 5
//
// See Docs/Soak.md for what each driver does and what each count means.
import Foundation

let options = Options.parseOrExit { print("threadkit-soak: \($0)") }
exit(Soak(options: options).run())
