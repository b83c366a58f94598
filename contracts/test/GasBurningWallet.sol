// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

/// @notice Test only: a contract "wallet" whose ERC-1271 check never ends (it burns whatever
///         gas it is given), as a stranger would deploy to make the service's node work.
contract GasBurningWallet {
    function isValidSignature(bytes32, bytes calldata) external view returns (bytes4) {
        uint256 i;
        while (gasleft() > 1_000) i++;
        return bytes4(uint32(i));
    }
}
