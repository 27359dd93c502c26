package migplace

import (
	"strings"
)

// The models below follow NVIDIA's Multi-Instance GPU User Guide: the profile tables of "Supported
// MIG Profiles" (A100 and H100 sections: profile names, fraction of memory and of SMs, number of
// instances available; for A100-SXM4-80GB the guide gives the 40GB table's profiles renamed by
// memory: 1g.10gb, 1g.10gb+me, 1g.20gb, 2g.20gb, 3g.40gb, 4g.40gb, 7g.80gb), the placement figures
// of the same section, and the "nvidia-smi mig -lgipp" listing of the guide's Getting Started
// chapter, which on an A100 reads, as profile ID and {starts}:size in memory slices:
//
//	ID 19 {0,1,2,3,4,5,6}:1   ID 20 {0,1,2,3,4,5,6}:1   ID 15 {0,2,4,6}:2   ID 14 {0,2,4}:2
//	ID  9 {0,4}:4             ID  5 {0}:4               ID  0 {0}:8
//
// H100-80GB has the same profile IDs, slices and placements, with the 80GB card's names. Profile IDs
// are those nvidia-smi mig -lgip prints (what NVML's GetGpuInstanceProfileInfo returns as Id).
// go-nvml's mock tables are not a source: its H100 mock gives 1g.20gb and 3g.40gb fewer memory
// slices than the guide.
//
// Not modelled: the media-extension variants other than 1g+me (2g+me exists on A30 only), the
// graphics (+gfx) and -me / +me.all profiles (Blackwell), and cards other than these three (A30,
// H100 NVL 94GB, H200, B200: other memory names and, on A30, 4 slices). A card of another model is
// not placeable by this package (ModelFor reports false) and stays static MIG.

// a100Placements are the placements every model here shares, by the profile's shape (the g of its
// name, and its memory slices), after the -lgipp listing above.
var (
	starts1x1 = []int{0, 1, 2, 3, 4, 5, 6} // 1g, one memory slice (the eighth slice is reachable only by 2-slice 1g, 3g and 7g)
	starts1x2 = []int{0, 2, 4, 6}          // 1g with two memory slices (1g.10gb on 40GB, 1g.20gb on 80GB)
	starts2x2 = []int{0, 2, 4}             // 2g: the listing has no start at 6
	starts3x4 = []int{0, 4}
	starts4x4 = []int{0}
	starts7x8 = []int{0}
)

// The supported models, built once; a Model is never changed after newModel returns it.
var (
	// A100_40GB is the NVIDIA A100 40GB (SXM4 and PCIe).
	A100_40GB = newModel("A100-40GB", []Profile{
		{Name: "1g.5gb", ID: 19, Compute: 1, Size: 1, MaxCount: 7, Starts: starts1x1},
		{Name: "1g.5gb+me", ID: 20, Compute: 1, Size: 1, MaxCount: 1, Starts: starts1x1},
		{Name: "1g.10gb", ID: 15, Compute: 1, Size: 2, MaxCount: 4, Starts: starts1x2},
		{Name: "2g.10gb", ID: 14, Compute: 2, Size: 2, MaxCount: 3, Starts: starts2x2},
		{Name: "3g.20gb", ID: 9, Compute: 3, Size: 4, MaxCount: 2, Starts: starts3x4},
		{Name: "4g.20gb", ID: 5, Compute: 4, Size: 4, MaxCount: 1, Starts: starts4x4},
		{Name: "7g.40gb", ID: 0, Compute: 7, Size: 8, MaxCount: 1, Starts: starts7x8},
	})
	// A100_80GB is the NVIDIA A100 80GB (SXM4 and PCIe).
	A100_80GB = newModel("A100-80GB", eightySlices())
	// H100_80GB is the NVIDIA H100 80GB (SXM5 HBM3 and PCIe).
	H100_80GB = newModel("H100-80GB", eightySlices())
)

// eightySlices are the profiles of an 80 GB A100 or H100.
func eightySlices() []Profile {
	return []Profile{
		{Name: "1g.10gb", ID: 19, Compute: 1, Size: 1, MaxCount: 7, Starts: starts1x1},
		{Name: "1g.10gb+me", ID: 20, Compute: 1, Size: 1, MaxCount: 1, Starts: starts1x1},
		{Name: "1g.20gb", ID: 15, Compute: 1, Size: 2, MaxCount: 4, Starts: starts1x2},
		{Name: "2g.20gb", ID: 14, Compute: 2, Size: 2, MaxCount: 3, Starts: starts2x2},
		{Name: "3g.40gb", ID: 9, Compute: 3, Size: 4, MaxCount: 2, Starts: starts3x4},
		{Name: "4g.40gb", ID: 5, Compute: 4, Size: 4, MaxCount: 1, Starts: starts4x4},
		{Name: "7g.80gb", ID: 0, Compute: 7, Size: 8, MaxCount: 1, Starts: starts7x8},
	}
}

// Models lists the supported models.
func Models() []*Model { return []*Model{A100_40GB, A100_80GB, H100_80GB} }

// ModelFor returns the model of a card, from the name and memory NVML reports (GetName,
// GetMemoryInfo's total in MiB): an A100 or H100 whose memory is near 40 or 80 GiB. Names seen:
// "NVIDIA A100-SXM4-40GB", "NVIDIA A100-PCIE-40GB", "NVIDIA A100-SXM4-80GB", "NVIDIA A100 80GB
// PCIe", "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe". The memory decides between 40 and 80 GB (a
// name need not say it); other memory sizes (H100 NVL's 94 GB, an H100 96GB) have other profile
// names, and are not modelled.
func ModelFor(name string, memoryMiB int64) (*Model, bool) {
	n := strings.ToUpper(name)
	gib := memoryMiB / 1024
	switch {
	case strings.Contains(n, "A100") && gib >= 36 && gib <= 44:
		return A100_40GB, true
	case strings.Contains(n, "A100") && gib >= 76 && gib <= 84:
		return A100_80GB, true
	case strings.Contains(n, "H100") && gib >= 76 && gib <= 84:
		return H100_80GB, true
	}
	return nil, false
}
