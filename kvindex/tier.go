package kvindex

import "strings"

// Tier is the cache medium a block is held in. Lower tiers are faster: a
// block held in several tiers of one pod counts for the lowest.
type Tier uint8

// The tiers vLLM reports in the events' medium field.
const (
	TierGPU   Tier = iota // "GPU", or no medium (vLLM's default)
	TierCPU               // "CPU": offloaded to host memory
	TierDisk              // "DISK", "STORAGE": offloaded to local or remote storage
	TierOther             // any other medium
	NumTiers  = 4
)

var tierNames = [NumTiers]string{"gpu", "cpu", "disk", "other"}

// String returns the tier's lower-case name.
func (t Tier) String() string {
	if int(t) < NumTiers {
		return tierNames[t]
	}
	return "invalid"
}

// ParseTier maps an event's medium to a tier: "" (nil) is GPU, names are
// matched case-insensitively, and an unknown medium is TierOther.
func ParseTier(medium string) Tier {
	switch strings.ToUpper(medium) {
	case "", "GPU", "CUDA", "HBM":
		return TierGPU
	case "CPU", "HOST", "DRAM":
		return TierCPU
	case "DISK", "STORAGE", "SSD", "NVME":
		return TierDisk
	default:
		return TierOther
	}
}
