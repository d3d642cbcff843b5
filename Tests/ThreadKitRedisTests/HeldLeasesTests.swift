import SeededRandom
import Testing
import ThreadKit
@testable import ThreadKitRedis

/// How a coordinator numbers its ends of a lease: pure, and checked against the model that the
/// script transcribes.
@Suite("HeldLeases")
struct HeldLeasesTests {
    /// The next end of `token`: its number and whether it is the last, as text.
    func end(_ leases: inout HeldLeases, _ token: UInt64) -> String {
        leases.ended(token).map { "\($0.number) \($0.last)" } ?? "none"
    }

    @Test("One reservation: its end is number 1 and the last; a token not held has no end")
    func single() {
        var leases = HeldLeases()
        let new = leases.answered(holding: nil, reserved: 7)
        #expect(new == .renew)
        let end1 = end(&leases, 7)
        #expect(end1 == "1 true")
        #expect(leases.leases.isEmpty)
        let end2 = end(&leases, 7)
        #expect(end2 == "none")
    }

    @Test("Nested reservations: ends are numbered 1, 2, 3…, and only the last stops the renewal")
    func nested() {
        var leases = HeldLeases()
        var answers = [leases.answered(holding: nil, reserved: 7)]
        for _ in 0..<2 {
            let counted = leases.asking(holding: 7)
            #expect(counted)
            answers.append(leases.answered(holding: 7, reserved: 7))
        }
        #expect(answers == [.renew, .none, .none])
        let end3 = end(&leases, 7)
        #expect(end3 == "1 false")
        let end4 = end(&leases, 7)
        #expect(end4 == "2 false")
        let end5 = end(&leases, 7)
        #expect(end5 == "3 true")
    }

    @Test("A nested reserve with an unknown outcome is covered by the lease's last end; one for a lease not held is not counted")
    func unknownNested() {
        var leases = HeldLeases()
        _ = leases.answered(holding: nil, reserved: 7)
        let counted = [leases.asking(holding: 7), leases.asking(holding: 9), leases.asking(holding: nil)]
        #expect(counted == [true, false, false])
        let outcome = leases.answered(holding: 7, reserved: nil)
        #expect(outcome == HeldLeases.Outcome.none)
        #expect(leases.leases == [7: HeldLeases.Lease(holders: 1, taken: 2, ended: 0)])
        let end6 = end(&leases, 7)
        #expect(end6 == "2 true")
    }

    @Test("The last end sent while a nested reserve is in flight covers it, and its late answer gets that end again, no new lease")
    func lastEndWhileNestedInFlight() {
        var leases = HeldLeases()
        _ = leases.answered(holding: nil, reserved: 7)
        let counted = leases.asking(holding: 7)
        #expect(counted)
        let last = end(&leases, 7)
        #expect(last == "2 true")
        // Gone for every reservation here, but kept until the reserve in flight is answered.
        let again = end(&leases, 7)
        #expect(again == "none")
        let late = leases.answered(holding: 7, reserved: 7)
        #expect(late == .endAgain(number: 2))
        #expect(leases.leases.isEmpty)
        // Its reservation's end later finds nothing to number.
        let afterwards = end(&leases, 7)
        #expect(afterwards == "none")
    }

    @Test("Against the model: the lease is held while a reservation of this process holds it, and ends with the last, whether the unknown reserves ran or not",
          arguments: 0..<50)
    func againstTheModel(seed: UInt64) {
        var random = SplitMix64(seed: 0x4E1D_0000 + seed)
        var model = SharedThrottle()
        var leases = HeldLeases()
        var now: Int64 = 1_000
        func request(holding: UInt64?, token: UInt64) -> SharedThrottle.Request {
            SharedThrottle.Request(
                now: now, gap: 0, monitor: .serial, limit: nil, horizon: 1_000_000, leaseTTL: 1_000_000_000, holding: holding,
                token: token, asker: 1)
        }
        guard case .reserved(_, _, let token?) = model.request(request(holding: nil, token: 42)) else {
            Issue.record("no lease")
            return
        }
        _ = leases.answered(holding: nil, reserved: token)
        var holders = 1
        // Nested reserves sent and not answered yet: whether each runs on Redis (before any end
        // that follows it on the connection), and whether its answer arrives.
        var inFlight: [(runs: Bool, answered: Bool)] = []
        var lastSent = false
        while !lastSent || !inFlight.isEmpty {
            now += 10
            let choice = random.weighted([0: lastSent ? 0 : 2, 1: 2, 2: lastSent ? 0 : 2])
            if choice == 0 {
                // A nested reserve is sent: Redis runs it now (or never: its connection dropped).
                let counted = leases.asking(holding: token)
                #expect(counted)
                let runs = random.chance(0.8)
                if runs {
                    guard case .reserved(_, _, let nested?) = model.request(request(holding: token, token: 99)), nested == token else {
                        Issue.record("the nested reserve did not join the lease")
                        return
                    }
                }
                inFlight.append((runs, runs && random.chance(0.7)))
            } else if choice == 1, !inFlight.isEmpty {
                // Its outcome arrives: the lease, or an unknown outcome.
                let ask = inFlight.removeFirst()
                switch leases.answered(holding: token, reserved: ask.answered ? token : nil) {
                case .none:
                    if ask.answered { holders += 1 }
                case .endAgain(let number):
                    #expect(ask.answered && lastSent)
                    _ = model.finished(token: token, number: number, now: now)
                case .renew:
                    Issue.record("seed \(seed): a late answer made a new lease")
                }
            } else if holders > 0 {
                guard let end = leases.ended(token) else {
                    Issue.record("no end for a held lease")
                    return
                }
                holders -= 1
                #expect(end.last == (holders == 0))
                lastSent = end.last
                let held = model.finished(token: token, number: end.number, now: now)
                #expect(held)
                // Sent again (its reply lost): nothing changes.
                if random.chance(0.3) { _ = model.finished(token: token, number: end.number, now: now) }
                #expect((model.lease != nil) == (holders > 0), "seed \(seed): \(holders) holders, lease \(String(describing: model.lease))")
            }
        }
        #expect(model.lease == nil, "seed \(seed): the lease outlived its holders")
        #expect(leases.leases.isEmpty)
    }
}
