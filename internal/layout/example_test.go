package layout

import "fmt"

func Example() {
	fmt.Println(MetaName("0123456789abcdef", 7))
	fmt.Println(StateFileName("0123456789abcdef", 7, "count", 3))
	n, _ := ParseName("ckpt-0123456789abcdef-00000000000000000007.op-count-kg-00003.avro")
	fmt.Println(n.Kind, n.Run, n.ID, n.Operator, n.KeyGroup)
	// Output:
	// ckpt-0123456789abcdef-00000000000000000007.meta
	// ckpt-0123456789abcdef-00000000000000000007.op-count-kg-00003.avro
	// state 0123456789abcdef 7 count 3
}
