// SPDX-License-Identifier: MIT
pragma solidity ^0.8.28;

import {OwnedWallet} from "./OwnedWallet.sol";

/// @notice Test only: deploys OwnedWallets at addresses known before they exist (CREATE2), as
///         account-abstraction factories do, so a wallet not yet deployed can sign (ERC-6492).
contract OwnedWalletFactory {
    function deploy(address owner, bytes32 salt) external returns (address) {
        return address(new OwnedWallet{salt: salt}(owner));
    }

    function addressOf(address owner, bytes32 salt) external view returns (address) {
        bytes32 init = keccak256(abi.encodePacked(type(OwnedWallet).creationCode, abi.encode(owner)));
        return address(uint160(uint256(keccak256(abi.encodePacked(bytes1(0xff), address(this), salt, init)))));
    }
}
