/* The standard types the header uses, by name only: tools/abi_manifest.py preprocesses the header
 * with these in place of the system's (-nostdinc), so that pycparser, which parses C99 and no
 * compiler extensions, reads every type by the name the header gives it. */
typedef signed char int8_t;
typedef short int16_t;
typedef int int32_t;
typedef long long int64_t;
typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef unsigned long long uint64_t;
typedef unsigned long uintptr_t;
