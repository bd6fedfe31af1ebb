// SPDX-License-Identifier: Apache-2.0
#include <cstdio>
int main() { std::puts("cortado"); return 0; }
