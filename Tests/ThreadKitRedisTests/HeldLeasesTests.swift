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
        let new = leases.reserved(7)
        #expect(new)
        let end1 = end(&leases, 7)
        #expect(end1 == "1 true")
        #expect(leases.leases.isEmpty)
        let end2 = end(&leases, 7)
        #expect(end2 == "none")
    }

    @Test("Nested reservations: ends are numbered 1, 2, 3…, and only the last stops the renewal")
    func nested() {
        var leases = HeldLeases()
        let answers = [leases.reserved(7), leases.reserved(7), leases.reserved(7)]
        #expect(answers == [true, false, false])
        let end3 = end(&leases, 7)
        #expect(end3 == "1 false")
        let end4 = end(&leases, 7)
        #expect(end4 == "2 false")
        let end5 = end(&leases, 7)
        #expect(end5 == "3 true")
    }

    @Test("A nested reserve with an unknown outcome is covered by the lease's last end; one for a lease not held changes nothing")
    func unknownNested() {
        var leases = HeldLeases()
        _ = leases.reserved(7)
        leases.unknownOutcome(holding: 7)
        leases.unknownOutcome(holding: 9)
        leases.unknownOutcome(holding: nil)
        #expect(leases.leases == [7: HeldLeases.Lease(holders: 1, taken: 2, ended: 0)])
        let end6 = end(&leases, 7)
        #expect(end6 == "2 true")
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
        _ = leases.reserved(token)
        var holders = 1
        while holders > 0 {
            now += 10
            if random.chance(0.5) {
                // A nested reserve: answered, or its reply lost (and it ran, or not).
                let outcome = random.weighted([0: 3, 1: 1, 2: 1])
                if outcome != 2 {
                    guard case .reserved(_, _, let nested?) = model.request(request(holding: token, token: 99)), nested == token else {
                        Issue.record("the nested reserve did not join the lease")
                        return
                    }
                }
                if outcome == 0 {
                    _ = leases.reserved(token)
                    holders += 1
                } else {
                    leases.unknownOutcome(holding: token)
                }
            } else {
                guard let end = leases.ended(token) else {
                    Issue.record("no end for a held lease")
                    return
                }
                holders -= 1
                #expect(end.last == (holders == 0))
                let held = model.finished(token: token, number: end.number, now: now)
                #expect(held)
                // Sent again (its reply lost): nothing changes.
                if random.chance(0.3) { _ = model.finished(token: token, number: end.number, now: now) }
                #expect((model.lease != nil) == (holders > 0), "seed \(seed): \(holders) holders, lease \(String(describing: model.lease))")
            }
        }
    }
}
