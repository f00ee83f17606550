package redisindex

import (
	"strconv"

	"github.com/kvrouter/kvrouter/kvindex"
)

// nsTag is a namespace's hash tag body: FNV-1a of the model name in hex, so
// that no model name can break a tag.
func nsTag(namespace string) string {
	h := uint64(14695981039346656037)
	for i := 0; i < len(namespace); i++ {
		h ^= uint64(namespace[i])
		h *= 1099511628211
	}
	return strconv.FormatUint(h, 16)
}

// blockKey is the key of block h in the namespace with tag tag.
func (x *Index) blockKey(buf []byte, tag string, h uint64) []byte {
	buf = append(buf, x.cfg.Prefix...)
	buf = append(buf, '{')
	buf = append(buf, tag...)
	buf = append(buf, ':')
	buf = strconv.AppendUint(buf, h%uint64(x.cfg.Groups), 16)
	buf = append(buf, "}b:"...)
	return strconv.AppendUint(buf, h, 16)
}

// epochKey is the key of a namespace's pod epochs.
func (x *Index) epochKey(tag string) string {
	return x.cfg.Prefix + "{" + tag + "}e"
}

// leaseKey is the key of a pod's writer lease.
func (x *Index) leaseKey(pod string) string {
	return x.cfg.Prefix + "lease:{" + pod + "}"
}

// epochField is the field of a pod's epoch in one tier.
func epochField(pod string, tier kvindex.Tier) string {
	return pod + ":" + strconv.Itoa(int(tier))
}

// holderField is a real holder's field: "<tier>:<epoch>:<pod>".
func holderField(pod string, tier kvindex.Tier, epoch int64) string {
	return strconv.Itoa(int(tier)) + ":" + strconv.FormatInt(epoch, 10) + ":" + pod
}

// specField is a speculative holder's field: "s:<pod>".
func specField(pod string) string { return "s:" + pod }

// parseHolder splits a block key's field. It reports ok = false for a
// field of no known shape.
func parseHolder(f string) (pod string, tier kvindex.Tier, epoch int64, spec, ok bool) {
	if len(f) > 2 && f[0] == 's' && f[1] == ':' {
		return f[2:], 0, 0, true, true
	}
	if len(f) < 5 || f[0] < '0' || int(f[0]-'0') >= kvindex.NumTiers || f[1] != ':' {
		return "", 0, 0, false, false
	}
	tier = kvindex.Tier(f[0] - '0')
	rest := f[2:]
	i := 0
	for i < len(rest) && rest[i] != ':' {
		i++
	}
	if i == 0 || i >= len(rest)-1 {
		return "", 0, 0, false, false
	}
	e, err := strconv.ParseInt(rest[:i], 10, 64)
	if err != nil || e < 0 {
		return "", 0, 0, false, false
	}
	return rest[i+1:], tier, e, false, true
}
