# Shared-secret authentication (core/control/auth.c): HMAC-SHA256 and
# nonces from OpenSSL's libcrypto (Debian: libssl-dev).  Included from
# core/CMakeLists.txt.
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
target_link_libraries(tern_core_obj PUBLIC OpenSSL::Crypto)
target_link_libraries(tern PRIVATE OpenSSL::Crypto)
target_link_libraries(tern_internal PUBLIC OpenSSL::Crypto)
