import Testing
@testable import ThreadKitRedis

@Suite("SHA-1 of a script's source")
struct SHA1Tests {
    @Test("the digest matches the FIPS 180 and RFC 3174 test vectors")
    func knownVectors() {
        #expect(SHA1.hex([]) == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        #expect(SHA1.hex(Array("abc".utf8)) == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(SHA1.hex(Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8)) == "84983e441c3bd26ebaae4aa1f95129e5e54670f1")
        #expect(SHA1.hex(Array("The quick brown fox jumps over the lazy dog".utf8)) == "2fd4e1c67a2d28fced849ee1bb76e7391b93eb12")
        #expect(SHA1.hex([UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000)) == "34aa973cd4c4daa4f61eeb2bdbad27316534016f")
    }

    @Test("messages around the 64-byte block and its 56-byte padding edge hash as sha1sum does")
    func paddingEdges() {
        // Reference digests from `sha1sum` of "x" repeated n times.
        let expected: KeyValuePairs<Int, String> = [
            55: "cef734ba81a024479e09eb5a75b6ddae62e6abf1",
            56: "901305367c259952f4e7af8323f480d59f81335b",
            63: "0ddc4e0cccd9a12850deb5abb0853a4425559fec",
            64: "bb2fa3ee7afb9f54c6dfb5d021f14b1ffe40c163",
            65: "78c741ddc482e4cdf8c474a0876347a0905b6233",
            119: "4300320394f7ee239bcdce7d3b8bcee173a0cd5c",
            120: "ceb2821639c4b6dcb10bce0e522ca2e608ce056d",
        ]
        for (length, digest) in expected {
            #expect(SHA1.hex([UInt8](repeating: UInt8(ascii: "x"), count: length)) == digest, "length \(length)")
        }
    }

    @Test("a script's sha1 is its source's digest")
    func scriptName() {
        let script = RedisScript("return 1")
        #expect(script.sha1 == SHA1.hex(Array("return 1".utf8)))
        #expect(script.description == "script \(script.sha1)")
    }
}
