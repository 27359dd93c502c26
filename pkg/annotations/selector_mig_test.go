package annotations

import "testing"

func TestCheckDeviceMIGInstance(t *testing.T) {
	const model, parent, mig, other = "NVIDIA A100-SXM4-80GB", "GPU-p", "MIG-a", "MIG-b"
	tests := []struct {
		name string
		sel  Selector
		// uuid and parent of the device checked ("" parent: a whole card).
		uuid, parent string
		want         Mismatch
	}{
		{name: "use-gputype matches the parent's model", sel: Selector{UseTypes: []string{"a100"}}, uuid: mig, parent: parent, want: MatchOK},
		{name: "nouse-gputype of the parent's model excludes it", sel: Selector{NoUseTypes: []string{"a100"}}, uuid: mig, parent: parent, want: MismatchNoUseType},
		{name: "use-gpuuuid of the parent allows every instance", sel: Selector{UseUUIDs: []string{parent}}, uuid: mig, parent: parent, want: MatchOK},
		{name: "use-gpuuuid of the instance allows it", sel: Selector{UseUUIDs: []string{mig}}, uuid: mig, parent: parent, want: MatchOK},
		{name: "use-gpuuuid of another instance refuses it", sel: Selector{UseUUIDs: []string{other}}, uuid: mig, parent: parent, want: MismatchUseUUID},
		{name: "nouse-gpuuuid of the parent excludes every instance", sel: Selector{NoUseUUIDs: []string{parent}}, uuid: mig, parent: parent, want: MismatchNoUseUUID},
		{name: "nouse-gpuuuid of the instance excludes it", sel: Selector{NoUseUUIDs: []string{mig}}, uuid: mig, parent: parent, want: MismatchNoUseUUID},
		{name: "nouse-gpuuuid of another instance keeps it", sel: Selector{NoUseUUIDs: []string{other}}, uuid: mig, parent: parent, want: MatchOK},
		{name: "use of the parent with nouse of the instance excludes it", sel: Selector{UseUUIDs: []string{parent}, NoUseUUIDs: []string{mig}}, uuid: mig, parent: parent, want: MismatchNoUseUUID},
		{name: "type rules come first", sel: Selector{UseTypes: []string{"h100"}, UseUUIDs: []string{parent}}, uuid: mig, parent: parent, want: MismatchUseType},
		{name: "a whole card is checked as by Check", sel: Selector{UseUUIDs: []string{parent}}, uuid: "GPU-q", want: MismatchUseUUID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.sel.CheckDevice(model, tt.uuid, tt.parent); got != tt.want {
				t.Errorf("CheckDevice(%q, %q, %q) = %v, want %v", model, tt.uuid, tt.parent, got, tt.want)
			}
		})
	}
}
